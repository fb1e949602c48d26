package mq

import (
	"fmt"

	"github.com/acemq/acemq-go/internal/seam"
)

// What package mqtest's Publisher needs to answer as a Publisher would,
// without mq exporting it: the validator a publish runs, and whether a
// publisher built with given options is mandatory. Registered in a file of
// its own so the fake and the runtime share one validator.
func init() {
	seam.Set(seamCheckPublish)
	seam.Set(seamMandatory)
}

// seamCheckPublish runs on m, published to exchange with key, the checks
// Publisher.Publish runs before anything reaches the wire (with the frame
// size amqp091-go asks for), and fails as Publish does: the same error,
// matching ErrInvalid.
func seamCheckPublish(exchange, key string, m Message) error {
	cp, err := checkPublish(exchange, key, m.publishing())
	if err == nil {
		err = cp.fitsFrame(defaultFrameMax)
	}
	if err != nil {
		p := Publisher{exchange: exchange}
		return fmt.Errorf("mq: publish to %s: %w", p.dest(key), err)
	}
	return nil
}

// seamMandatory reports whether a publisher given opts is mandatory, as
// Broker.Publisher builds it.
func seamMandatory(opts []PublisherOption) bool {
	p := Publisher{mandatory: true}
	for _, o := range opts {
		if o != nil {
			o.applyPublisher(&p)
		}
	}
	return p.mandatory
}
