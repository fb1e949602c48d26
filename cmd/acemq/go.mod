module github.com/acemq/acemq-go/cmd/acemq

go 1.26.0

require (
	github.com/acemq/acemq-go v0.0.0-00010101000000-000000000000
	github.com/alecthomas/kong v1.17.0
	github.com/lmittmann/tint v1.2.1
	github.com/rabbitmq/amqp091-go v1.16.0
	github.com/schollz/progressbar/v3 v3.19.1
	go.uber.org/goleak v1.3.0
	golang.org/x/term v0.44.0
)

require (
	github.com/mitchellh/colorstring v0.0.0-20190213212951-d06e56a500db // indirect
	github.com/rivo/uniseg v0.4.7 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
	golang.org/x/sys v0.48.0 // indirect
)
