"""``kvgate help``: topics documented once (the engine flags), and any command's help."""

from __future__ import annotations

import argparse

from kvgate.errors import EXIT_OK, KvgateError
from kvgate.output import emit

NAME = "help"
HELP = "the engine flags kvgate accepts, documented once (kvgate help engine-flags [vllm|sglang|llama.cpp])"
DESCRIPTION = """\
  kvgate help engine-flags              vLLM's, SGLang's and llama.cpp's flags kvgate accepts:
                                        defaults per release, what each changes, which commands
  kvgate help engine-flags vllm         one engine's
  kvgate help COMMAND                   that command's --help
"""

TOPICS = {"engine-flags": "vLLM, SGLang and llama.cpp flags: defaults per release, what they change, where accepted"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("topic", nargs="?", default=None, metavar="TOPIC", help="engine-flags, or a command name")
    p.add_argument("engine", nargs="?", default=None, metavar="ENGINE", help="with engine-flags: vllm, sglang or llama.cpp")


def run(args: argparse.Namespace) -> int:
    from kvgate.cli import build_parser  # noqa: PLC0415

    if args.topic == "engine-flags":
        from kvgate.commands._engine_flags import engine_flags_dict, render_engine_flags  # noqa: PLC0415
        from kvgate.engines.registry import canonical_name  # noqa: PLC0415

        engine = (canonical_name(args.engine) or args.engine) if args.engine else args.engine
        emit(args.json, engine_flags_dict(engine), render_engine_flags(engine))
        return EXIT_OK
    if args.engine is not None:
        raise KvgateError(f"kvgate help {args.topic} takes no second word", hint="kvgate help engine-flags vllm")
    if args.topic is None:
        parser = build_parser(names_only=True)
        lines = ["topics:"] + [f"  {k:<14} {v}" for k, v in TOPICS.items()] + ["", "commands (kvgate help COMMAND):"]
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        lines += [f"  {c.dest:<14} {c.help}" for c in sub._choices_actions]
        emit(args.json, {"topics": TOPICS, "commands": {c.dest: c.help for c in sub._choices_actions}}, "\n".join(lines))
        return EXIT_OK
    from kvgate.cli import _module_names  # noqa: PLC0415

    mod = args.topic.replace("-", "_")
    if mod not in _module_names():  # never import a name the user typed that is not a command
        raise KvgateError(f"no command or topic {args.topic!r}", hint="kvgate help lists them")
    parser = build_parser(mod)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    if args.topic not in sub.choices:
        raise KvgateError(f"no command or topic {args.topic!r}", hint="kvgate help lists them")
    text = sub.choices[args.topic].format_help()
    emit(args.json, {"command": args.topic, "help": text}, text.rstrip("\n"))
    return EXIT_OK
