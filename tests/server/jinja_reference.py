#!/usr/bin/python3
"""Renders chat templates with Python's jinja2 the way transformers' apply_chat_template does:
the reference output tests/server/test_server_jinja_reference.cpp compares turbokv's interpreter with.

stdin:  {"template": str, "now": unix seconds, "cases": [{"name": str, "context": {...}}, ...]}
stdout: [{"name": str, "text": str} or {"name": str, "error": str}, ...]

As transformers (src/transformers/utils/chat_template_utils.py): an ImmutableSandboxedEnvironment
with trim_blocks and lstrip_blocks, the loopcontrols extension, its own tojson (json.dumps with
ensure_ascii=False), raise_exception and strftime_now (here at the fixed time "now", local time,
so runs are deterministic).
"""
import datetime
import json
import sys

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def main():
    request = json.load(sys.stdin)
    now = datetime.datetime.fromtimestamp(request["now"])

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return now.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    template = env.from_string(request["template"])
    out = []
    for case in request["cases"]:
        try:
            out.append({"name": case["name"], "text": template.render(**case["context"])})
        except Exception as e:  # the C++ side must fail too
            out.append({"name": case["name"], "error": f"{type(e).__name__}: {e}"})
    json.dump(out, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
