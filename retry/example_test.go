package retry_test

import (
	"fmt"
	"time"

	"github.com/acemq/acemq-go/retry"
)

func ExampleExponential() {
	p := retry.Exponential(6, 10*time.Second)
	fmt.Println("attempts:", p.Attempts())
	fmt.Println("schedule:", p.Schedule())
	fmt.Println("broker rungs:", p.BrokerRungs())
	fmt.Println("valid:", p.Validate() == nil)
	// Output:
	// attempts: 6
	// schedule: [10s 20s 40s 1m20s 2m40s]
	// broker rungs: [40s 1m20s 2m40s]
	// valid: true
}

func ExamplePolicy_After() {
	p := retry.Exponential(4, 20*time.Second)
	for attempt := 1; attempt <= p.Attempts(); attempt++ {
		step := p.After(attempt)
		if step.Next == 0 {
			fmt.Printf("attempt %d failed: %s\n", attempt, step)
			continue
		}
		fmt.Printf("attempt %d failed: wait %v (%s), then attempt %d\n", attempt, step.Wait, step, step.Next)
	}
	// Output:
	// attempt 1 failed: wait 20s (in-process), then attempt 2
	// attempt 2 failed: wait 40s (broker), then attempt 3
	// attempt 3 failed: wait 1m20s (broker), then attempt 4
	// attempt 4 failed: exhausted
}

func ExampleWaits() {
	p := retry.Waits(1500*time.Millisecond, 5*time.Second).With(retry.InProcessLimit(0))
	fmt.Println(p.Validate())
	// Output:
	// retry: invalid policy: broker wait 1.5s is not a whole number of seconds (in-process limit 0s)
}
