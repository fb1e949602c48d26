package mq_test

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/acemq/acemq-go/mq"
)

func TestAttemptOf(t *testing.T) {
	huge := strings.Repeat("9", 40)
	cases := []struct {
		name string
		v    any
		want int
	}{
		{"int8", int8(3), 3},
		{"int8 negative", int8(-3), 1},
		{"int16", int16(4), 4},
		{"int32", int32(5), 5},
		{"int32 zero", int32(0), 1},
		{"int32 max", int32(math.MaxInt32), math.MaxInt32},
		{"int32 min", int32(math.MinInt32), 1},
		{"int64", int64(6), 6},
		{"int64 huge", int64(math.MaxInt64), math.MaxInt32},
		{"int64 min", int64(math.MinInt64), 1},
		{"int", 7, 7},
		{"int negative", -7, 1},
		{"uint", uint(8), 8},
		{"uint huge", uint(math.MaxUint), math.MaxInt32},
		{"uint8", uint8(9), 9},
		{"uint16", uint16(10), 10},
		{"uint32", uint32(11), 11},
		{"uint32 max", uint32(math.MaxUint32), math.MaxInt32},
		{"uint64", uint64(12), 12},
		{"uint64 max", uint64(math.MaxUint64), math.MaxInt32},
		{"float32", float32(3), 3},
		{"float32 2.9", float32(2.9), 2},
		{"float32 NaN", float32(math.NaN()), 1},
		{"float32 +Inf", float32(math.Inf(1)), math.MaxInt32},
		{"float64", 4.0, 4},
		{"float64 2.9", 2.9, 2},
		{"float64 NaN", math.NaN(), 1},
		{"float64 +Inf", math.Inf(1), math.MaxInt32},
		{"float64 -Inf", math.Inf(-1), 1},
		{"float64 negative", -2.5, 1},
		{"float64 0.5", 0.5, 1},
		{"float64 1e300", 1e300, math.MaxInt32},
		{"decimal 3", amqp.Decimal{Scale: 0, Value: 3}, 3},
		{"decimal 3.50", amqp.Decimal{Scale: 2, Value: 350}, 3},
		{"decimal negative", amqp.Decimal{Scale: 1, Value: -50}, 1},
		{"decimal scale 255", amqp.Decimal{Scale: 255, Value: math.MaxInt32}, 1},
		{"string", "3", 3},
		{"string spaces", " 4 ", 4},
		{"string tabs and newline", "\t5\n", 5},
		{"string float", "2.9", 2},
		{"string negative", "-4", 1},
		{"string zero", "0", 1},
		{"string junk", "x", 1},
		{"string empty", "", 1},
		{"string huge", huge, 1},
		{"string 20 digits", "99999999999999999999", math.MaxInt32},
		{"string NaN", "NaN", 1},
		{"string Inf", "Inf", math.MaxInt32},
		{"string max int64", strconv.FormatInt(math.MaxInt64, 10), math.MaxInt32},
		{"bytes", []byte("6"), 6},
		{"bytes spaces", []byte(" 7 "), 7},
		{"bytes junk", []byte{0xff, 0x00}, 1},
		{"bytes huge", []byte(strings.Repeat("1", 1<<16)), 1},
		{"bytes empty", []byte{}, 1},
		{"nested table", amqp.Table{"x-acemq-attempt": int32(9)}, 1},
		{"array", []any{int32(3)}, 1},
		{"bool", true, 1},
		{"time", time.Unix(5, 0), 1},
		{"nil", nil, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := mq.AttemptOf(amqp.Table{mq.HeaderAttempt: c.v}); got != c.want {
				t.Errorf("AttemptOf(%T %v) = %d, want %d", c.v, c.v, got, c.want)
			}
		})
	}
	t.Run("absent", func(t *testing.T) {
		if got := mq.AttemptOf(amqp.Table{"other": int32(5)}); got != 1 {
			t.Errorf("AttemptOf(no header) = %d, want 1", got)
		}
	})
	t.Run("nil table", func(t *testing.T) {
		if got := mq.AttemptOf(nil); got != 1 {
			t.Errorf("AttemptOf(nil) = %d, want 1", got)
		}
	})
}

func FuzzAttemptOf(f *testing.F) {
	f.Add("3", []byte(" 4 "), 2.9, int64(5))
	f.Add("", []byte{}, math.NaN(), int64(math.MinInt64))
	f.Add("1e400", []byte("-1"), math.Inf(1), int64(math.MaxInt64))
	f.Add(" -0x10 ", []byte("NaN"), -1e300, int64(0))
	f.Fuzz(func(t *testing.T, s string, b []byte, fl float64, n int64) {
		values := []any{
			s, b, fl, float32(fl), n, int32(n), int16(n), int8(n), uint64(n), uint32(n),
			uint16(n), uint8(n), int(n), uint(n),
			amqp.Decimal{Scale: uint8(n), Value: int32(n >> 8)},
		}
		for _, v := range values {
			got := mq.AttemptOf(amqp.Table{mq.HeaderAttempt: v})
			if got < 1 || got > math.MaxInt32 {
				t.Fatalf("AttemptOf(%T %v) = %d, out of [1, MaxInt32]", v, v, got)
			}
		}
	})
}
