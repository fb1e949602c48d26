package main

import "errors"

// fieldSchedule is -mode field's schedule; it needs fieldnet's package
// internal/field/fault, not merged into this branch yet.
func fieldSchedule(options) (schedule, error) {
	return nil, errors.New("-mode field needs internal/field/fault (branch fieldnet), not merged yet; use -mode cluster")
}
