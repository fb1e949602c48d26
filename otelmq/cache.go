package otelmq

import (
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// maxCached bounds each cache: past it, what would be cached is computed
// per call instead, so a service that publishes to ever new destinations
// cannot grow memory without end.
const maxCached = 4096

// cache keeps, per destination, what every publish or delivery to it would
// otherwise compute again: the span name, the constant attributes and the
// metric attribute sets. Reads take a read lock only.
type cache[K comparable, V any] struct {
	mu sync.RWMutex
	m  map[K]*V
}

func (c *cache[K, V]) get(k K, build func(K) *V) *V {
	c.mu.RLock()
	v, ok := c.m[k]
	c.mu.RUnlock()
	if ok {
		return v
	}
	v = build(k)
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.m[k]; ok {
		return old
	}
	if len(c.m) < maxCached {
		if c.m == nil {
			c.m = make(map[K]*V)
		}
		c.m[k] = v
	}
	return v
}

// measure is an attribute set ready to pass to an instrument: the options
// are built once, so recording allocates nothing of ours.
type measure struct {
	add []metric.AddOption
	rec []metric.RecordOption
}

func newMeasure(kvs ...attribute.KeyValue) *measure {
	opt := metric.WithAttributeSet(attribute.NewSet(kvs...))
	return &measure{add: []metric.AddOption{opt}, rec: []metric.RecordOption{opt}}
}

// measuresBy holds a base attribute list extended with one more attribute,
// by its value: error.type (a closed list, see ErrorType) or
// acemq.outcome. Values past maxValues are computed per call.
type measuresBy struct {
	base []attribute.KeyValue
	key  attribute.Key
	mu   sync.RWMutex
	m    map[string]*measure
}

const maxValues = 64

func (e *measuresBy) get(v string) *measure {
	e.mu.RLock()
	s, ok := e.m[v]
	e.mu.RUnlock()
	if ok {
		return s
	}
	kvs := make([]attribute.KeyValue, 0, len(e.base)+1)
	kvs = append(kvs, e.base...)
	s = newMeasure(append(kvs, e.key.String(v))...)
	e.mu.Lock()
	if e.m == nil {
		e.m = make(map[string]*measure)
	}
	if len(e.m) < maxValues {
		e.m[v] = s
	}
	e.mu.Unlock()
	return s
}
