//go:build !race

package otelmq_test

const raceEnabled = false
