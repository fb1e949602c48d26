#!/usr/bin/env python3
"""A second service on the same broker, written with pika (Debian's
python3-pika), for integration/broker_pika_test.go: it declares what the
contract's vectors say a library declares, typed the way a Python service's
values naturally go out (every integer as pika encodes an int, strings as
longstr), publishes a message and takes one back.

    pika_peer.py declare URL SPEC.json     declare the spec's exchanges, then its queues
    pika_peer.py publish URL QUEUE ID BODY publish BODY to QUEUE (default exchange), confirmed
    pika_peer.py take URL QUEUE SECONDS    take one message from QUEUE, ack it, print it

SPEC.json is {"exchanges": [{"name", "kind", "durable"}], "queues": [{"name",
"durable", "exclusive", "auto_delete", "arguments"}]}, every argument a typed
vector value ({"long": 40000}); see conformance/README.md. Each command prints
one JSON object on stdout; declare's lists the queues it left out because an
argument is a float, which pika cannot send. A declaration the broker
refuses prints {"refused": NAME, "error": ...} and exits 3; take finding
nothing in time exits 4; anything else unexpected exits 1.
"""

import datetime
import json
import sys
import time

import pika

INTEGERS = {"byte", "unsignedbyte", "short", "unsignedshort", "signedint", "unsignedint", "long"}


def value(typed):
    """A typed vector value as the Python value a pika service would send."""
    if not isinstance(typed, dict) or len(typed) != 1:
        raise ValueError("a typed value is an object with one key: %r" % (typed,))
    (kind, v), = typed.items()
    if kind in INTEGERS:
        return int(v)
    if kind in ("longstr",):
        return str(v)
    if kind == "binary":
        return v.encode()
    if kind == "bool":
        return bool(v)
    if kind in ("float", "double"):
        return float(v)
    if kind == "timestamp":
        return datetime.datetime.fromtimestamp(int(v), datetime.timezone.utc)
    if kind == "table":
        return {k: value(e) for k, e in v.items()}
    if kind == "array":
        return [value(e) for e in v]
    if kind == "void":
        return None
    raise ValueError("no Python value for AMQP type %r" % kind)


def has_float(typed):
    """Whether a typed value is or holds a float, which pika (1.2) cannot
    encode in a field table: its encoder has no float or double."""
    (kind, v), = typed.items()
    if kind in ("float", "double"):
        return True
    if kind == "table":
        return any(has_float(e) for e in v.values())
    if kind == "array":
        return any(has_float(e) for e in v)
    return False


def connect(url):
    return pika.BlockingConnection(pika.URLParameters(url))


def declare(url, spec_path):
    with open(spec_path) as f:
        spec = json.load(f)
    conn = connect(url)
    ch = conn.channel()
    n, current, unsendable = 0, None, []
    try:
        for e in spec.get("exchanges", []):
            current = e["name"]
            ch.exchange_declare(exchange=e["name"], exchange_type=e["kind"], durable=e["durable"])
            n += 1
        for q in spec["queues"]:
            current = q["name"]
            floats = sorted(k for k, t in q["arguments"].items() if has_float(t))
            if floats:  # pika cannot put a float in a field table
                unsendable.append({"queue": q["name"], "arguments": floats})
                continue
            args = {k: value(t) for k, t in q["arguments"].items()}
            ch.queue_declare(queue=q["name"], durable=q["durable"], exclusive=q["exclusive"],
                             auto_delete=q["auto_delete"], arguments=args)
            n += 1
    except pika.exceptions.ChannelClosedByBroker as err:
        print(json.dumps({"refused": current, "error": "%s %s" % (err.reply_code, err.reply_text)}))
        conn.close()
        sys.exit(3)
    conn.close()
    print(json.dumps({"declared": n, "unsendable": unsendable}))


def publish(url, queue, message_id, body):
    conn = connect(url)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.basic_publish(exchange="", routing_key=queue, body=body.encode(),
                     properties=pika.BasicProperties(message_id=message_id, delivery_mode=2),
                     mandatory=True)
    conn.close()
    print(json.dumps({"published": message_id}))


def show(v):
    """A header value as [python type, JSON-able value]."""
    if isinstance(v, bytes):
        return ["bytes", v.decode(errors="replace")]
    if isinstance(v, datetime.datetime):
        return ["datetime", int(v.replace(tzinfo=datetime.timezone.utc).timestamp())]
    if isinstance(v, dict):
        return ["dict", {k: show(e) for k, e in v.items()}]
    if isinstance(v, list):
        return ["list", [show(e) for e in v]]
    return [type(v).__name__, v]


def take(url, queue, seconds):
    conn = connect(url)
    ch = conn.channel()
    deadline = time.monotonic() + float(seconds)
    while True:
        method, props, body = ch.basic_get(queue=queue, auto_ack=False)
        if method is not None:
            break
        if time.monotonic() > deadline:
            conn.close()
            print(json.dumps({"empty": queue}))
            sys.exit(4)
        time.sleep(0.1)
    ch.basic_ack(method.delivery_tag)
    out = {
        "message_id": props.message_id,
        "body": body.decode(errors="replace"),
        "redelivered": method.redelivered,
        "headers": {k: show(v) for k, v in (props.headers or {}).items()},
    }
    conn.close()
    print(json.dumps(out))


def main(argv):
    cmds = {"declare": (declare, 2), "publish": (publish, 4), "take": (take, 3)}
    if len(argv) < 2 or argv[1] not in cmds or len(argv) - 2 != cmds[argv[1]][1]:
        print(__doc__, file=sys.stderr)
        return 2
    fn, _ = cmds[argv[1]]
    fn(*argv[2:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
