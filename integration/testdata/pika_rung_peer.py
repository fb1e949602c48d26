#!/usr/bin/env python3
"""Another language's service on the same queue as a Go one, for
integration/durable_rungs_test.go: it keeps its broker waits in CLASSIC
rungs, as docs/contract.md describes them, while the Go service keeps its
own in durable rungs. Written with pika (Debian's python3-pika).

    pika_rung_peer.py URL QUEUE WAIT_MS SECONDS

It declares the classic rung QUEUE.retry.<wait> with the contract's
argument table, then consumes QUEUE for SECONDS: a message on its first
attempt (no x-acemq-attempt, or 1) fails and hops to the classic rung (the
copy carries the next attempt and QUEUE as its source, the broker's
counters dropped; the original is acknowledged only once the broker has
confirmed the copy); a later attempt is handled and acknowledged. It
prints one JSON object: {"hopped": [ids], "handled": [{"id", "attempt",
"from"}]}, "from" being the queue the message's newest x-death names.
"""

import json
import sys
import time

import pika

BROKER_COUNTERS = ("x-delivery-count", "x-acquired-count")


def short(ms):
    s = ms // 1000
    if s <= 0:
        return "0s"
    if s % 3600 == 0:
        return "%dh" % (s // 3600)
    if s % 60 == 0:
        return "%dm" % (s // 60)
    return "%ds" % s


def main(url, queue, wait_ms, seconds):
    wait_ms = int(wait_ms)
    rung = queue + ".retry." + short(wait_ms)
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.queue_declare(queue=rung, durable=True, arguments={
        "x-dead-letter-exchange": "acemq.retry",
        "x-dead-letter-routing-key": queue,
        "x-message-ttl": wait_ms,
    })
    ch.confirm_delivery()
    ch.basic_qos(prefetch_count=1)
    hopped, handled = [], []
    deadline = time.monotonic() + float(seconds)
    for method, props, body in ch.consume(queue, inactivity_timeout=0.2):
        if time.monotonic() > deadline:
            break
        if method is None:
            continue
        headers = dict(props.headers or {})
        attempt = int(headers.get("x-acemq-attempt", 1))
        if attempt <= 1:
            for k in BROKER_COUNTERS:
                headers.pop(k, None)
            headers["x-acemq-attempt"] = attempt + 1
            headers["x-acemq-source-queue"] = queue
            copy = pika.BasicProperties(message_id=props.message_id, content_type=props.content_type,
                                        delivery_mode=2, headers=headers)
            ch.basic_publish(exchange="", routing_key=rung, body=body, properties=copy, mandatory=True)
            hopped.append(props.message_id)
        else:
            deaths = headers.get("x-death") or []
            came = deaths[0].get("queue", "") if deaths else ""
            if isinstance(came, bytes):
                came = came.decode()
            handled.append({"id": props.message_id, "attempt": attempt, "from": came})
        ch.basic_ack(method.delivery_tag)
    ch.cancel()
    conn.close()
    print(json.dumps({"hopped": hopped, "handled": handled}))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 5:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(*sys.argv[1:]))
