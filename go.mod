module github.com/acemq/acemq-go

go 1.26.0

require github.com/rabbitmq/amqp091-go v1.16.0
