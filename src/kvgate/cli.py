"""The ``kvgate`` command: a thin layer that parses arguments, calls the library, renders.

Each subcommand lives in its own module under :mod:`kvgate.commands` and provides::

    NAME: str                       # the subcommand, e.g. "geometry"
    HELP: str                       # one line for ``kvgate --help``
    DESCRIPTION: str                # the subcommand's ``--help`` text (optional)
    def add_arguments(p): ...       # argparse options; ``--json`` is added for you
    def run(args) -> int: ...       # exit status

Modules are discovered, so adding a command touches no shared file; a module
``commands/<name>.py`` serves the command ``<name>`` with ``_`` spelled ``-``. Only the
command being run is imported (``kvgate --version`` imports none), so start-up does not
pay for matplotlib, numpy, pynvml or transformers unless the command needs them. Errors
raised as :class:`kvgate.errors.KvgateError` print ``ERROR:``/``HINT:`` lines and exit 2.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import signal
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from kvgate.errors import EXIT_INPUT, EXIT_INTERNAL, EXIT_OK, KvgateError, exit_signal
from kvgate.output import StdoutError

# Order in ``kvgate --help``; discovered commands not listed here follow alphabetically.
_ORDER = ["demo", "geometry", "gate", "recheck", "measure", "run", "import-smi", "replay", "workload"]

_DESCRIPTION = """\
kvgate: the KV cache, sized exactly and measured, before you launch or build.

Sizes an LLM's KV cache as transformers, vLLM, SGLang and llama.cpp lay it out; says whether
a configuration fits and how many sequences run at once, whether a host KV tier pays for
your traffic, and whether a KV-cache optimization (paged KV, tiered KV, KV quantization)
pays on this GPU, model and context length; and records where each answer flips.

  kvgate fit llama-3.1-8b --gpu H100 --max-model-len 32k --max-num-seqs 16   (vLLM; SGLang,
      llama.cpp by their own flags)
  kvgate import-log vllm.log --model qwen3-30b-a3b      an engine's startup log: its KV pool
  kvgate tier --trace mooncake.jsonl --model llama-3.1-8b --device-capacity 64GiB \\
      --host-capacity 1TiB                              does a host KV tier pay?
  kvgate geometry qwen3-30b-a3b --max-seq 8192 --kv-format int8-f32scale
  kvgate demo                         the write-up's case: Qwen3-30B-A3B on an RTX 5090
  kvgate recheck RECORD.json --total 24GiB

Byte quantities take IEC (KiB, MiB, GiB: powers of 2) or SI (kB, MB, GB: powers of 10)
units; a bare number is bytes. Every command takes --json.
"""


class _Parser(argparse.ArgumentParser):
    """argparse with kvgate's error format: one ``ERROR:`` line, a ``HINT:``, exit 2."""

    #: set by :func:`main` when ``--json`` was asked for: usage errors then also print
    #: their JSON document on standard output.
    json_errors = False

    #: set by :func:`main`: the command named on the line and its option strings, so that an
    #: unknown option gets a "did you mean" and the command's own --help
    command: str | None = None
    options: frozenset[str] = frozenset()

    def error(self, message: str) -> None:  # type: ignore[override]
        prog = self.prog if self.prog != "kvgate" or not _Parser.command else f"kvgate {_Parser.command}"
        hint = f"{prog} --help lists the options"
        if "expected one argument" in message:
            opt = message.split(":", 1)[0].replace("argument ", "").split("/")[-1].strip() or "--name"
            hint = f"{opt} needs a value (one that starts with '-' takes the = form: {opt}=-…); " + hint
        from kvgate.commands._types import refusal_hint  # noqa: PLC0415

        said = refusal_hint(message)  # the value's own hint, which argparse does not pass on
        if said:
            hint = f"{said}; " + hint
        if message.startswith("unrecognized arguments:"):
            import difflib  # noqa: PLC0415

            unknown = [a.partition("=")[0] for a in message.split(":", 1)[1].split() if a.startswith("-")]
            close = [m for u in unknown for m in difflib.get_close_matches(u, sorted(_Parser.options), n=1,
                                                                          cutoff=0.75)]
            if close:
                hint = f"did you mean {', '.join(dict.fromkeys(close))}? " + hint
        if _Parser.json_errors:
            _json_error(message, hint, EXIT_INPUT)
        self.exit(EXIT_INPUT, _said("ERROR", message) + _said("HINT", hint))


def _said(label: str, text: str) -> str:
    """``LABEL: text`` and a newline: one line when standard error is a file or a pipe (one line
    an error, for grep and logs), wrapped to the terminal's width (at most 100 columns) with
    the continuation under the text when it is a terminal."""
    line = f"{label}: {text}"
    if not sys.stderr.isatty():
        return line + "\n"
    import shutil  # noqa: PLC0415
    import textwrap  # noqa: PLC0415

    width = min(100, shutil.get_terminal_size((100, 24)).columns)
    return textwrap.fill(line, width=width, subsequent_indent=" " * (len(label) + 2), break_on_hyphens=False,
                         break_long_words=False) + "\n"


def _json_requested(argv: Sequence[str]) -> bool:
    """Whether ``--json`` is among kvgate's own arguments (not a workload's after ``--``)."""
    head = list(argv[: list(argv).index("--")]) if "--" in argv else list(argv)
    return "--json" in head


def _json_error(message: str, hint: str | None, code: int) -> None:
    """Under ``--json``, an error is one JSON document on standard output:
    ``{"error": message, "hint": hint or null, "exit_code": code}`` (the ``ERROR:``
    and ``HINT:`` lines still go to standard error)."""
    import json  # noqa: PLC0415

    try:
        json.dump({"error": message, "hint": hint, "exit_code": code}, sys.stdout)
        sys.stdout.write("\n")
        sys.stdout.flush()
    except (OSError, ValueError):  # stdout closed or full: the stderr lines remain
        pass


def _fail(message: str, hint: str | None, code: int, as_json: bool) -> int:
    """Print an error (``ERROR:``/``HINT:`` on stderr; the JSON document under ``--json``)
    and return its exit code. An input error (exit 2) raised without a hint gets the
    command's ``--help`` as its hint: every input error says where to look next."""
    if not hint and code == EXIT_INPUT:
        hint = f"kvgate {_Parser.command} --help says what it takes" if _Parser.command else "kvgate --help"
    sys.stderr.write(_said("ERROR", message))
    if hint:
        sys.stderr.write(_said("HINT", hint))
    if as_json:
        _json_error(message, hint, code)
    return code


def _module_names() -> list[str]:
    """Command module names under :mod:`kvgate.commands` (not imported; ``_private`` skipped)."""
    import kvgate.commands as pkg

    return [m.name for m in pkgutil.iter_modules(pkg.__path__) if not m.name.startswith("_")]


def _commands(only: str | None = None) -> list[ModuleType]:
    """Command modules, in ``kvgate --help`` order; ``only``: just that module."""
    names = [only] if only else _module_names()
    mods = [importlib.import_module(f"kvgate.commands.{n}") for n in names]
    mods = [m for m in mods if hasattr(m, "NAME") and hasattr(m, "run")]
    rank = {name: i for i, name in enumerate(_ORDER)}
    return sorted(mods, key=lambda m: (rank.get(m.NAME, len(rank)), m.NAME))


class _Summary:
    """A command module's ``NAME`` and ``HELP`` read from its source, without importing it
    (``kvgate --help`` lists the commands and loads none of them)."""

    def __init__(self, name: str, help: str) -> None:
        self.NAME, self.HELP, self.DESCRIPTION = name, help, help
        self.run = None


def _summaries() -> list[Any]:
    """Every command as its ``NAME`` and ``HELP`` (string constants in its source); a module
    whose ``HELP`` is computed is imported, as :func:`_commands` does."""
    import ast  # noqa: PLC0415
    import importlib.util  # noqa: PLC0415

    out: list[Any] = []
    for n in _module_names():
        spec = importlib.util.find_spec(f"kvgate.commands.{n}")
        consts: dict[str, Any] = {}
        has_run = False
        if spec is not None and spec.origin and spec.origin.endswith(".py"):
            with open(spec.origin, encoding="utf-8") as f:
                tree = ast.parse(f.read())
            for node in tree.body:
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                    consts[node.targets[0].id] = node.value.value if isinstance(node.value, ast.Constant) else None
                has_run = has_run or (isinstance(node, ast.FunctionDef) and node.name == "run")
        if isinstance(consts.get("NAME"), str) and isinstance(consts.get("HELP"), str) and has_run:
            out.append(_Summary(consts["NAME"], consts["HELP"]))
        elif "NAME" in consts or spec is None:
            out += _commands(n)
    rank = {name: i for i, name in enumerate(_ORDER)}
    return sorted(out, key=lambda m: (rank.get(m.NAME, len(rank)), m.NAME))


def version() -> str:
    """kvgate's version from the installed package's metadata (``importlib.metadata``)."""
    import kvgate

    return str(kvgate.__version__)


class _VersionAction(argparse.Action):
    """``--version``: reads the package metadata only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 default: Any = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        parser.exit(0, f"kvgate {version()}\n")


def build_parser(only: str | None = None, *, names_only: bool = False) -> argparse.ArgumentParser:
    """The argument parser (used by ``main`` and by the README's help text); ``only``: the
    module name of the one command to add (start-up imports just that command);
    ``names_only``: the commands without their options (``kvgate --help``, an unknown
    command: what ``main`` prints then needs only each command's name and help line)."""
    parser = _Parser(
        prog="kvgate", description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action=_VersionAction, help="print kvgate's version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for mod in _summaries() if names_only and only is None else _commands(only):
        p = sub.add_parser(
            mod.NAME,
            help=mod.HELP,
            description=getattr(mod, "DESCRIPTION", mod.HELP),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        if names_only:
            continue
        from kvgate.commands._types import refuse_empty_values  # noqa: PLC0415 - a command's, not --help's

        mod.add_arguments(p)
        refuse_empty_values(p)  # "" is never "not given": every value-taking flag refuses it
        if mod.NAME != "fit":
            compact_engine_groups(p)
        if not any("--json" in a.option_strings for a in p._actions):
            p.add_argument("--json", action="store_true", help="print machine-readable JSON instead of text")
        p.set_defaults(_run=mod.run)
    return parser


def compact_engine_groups(p: argparse.ArgumentParser) -> None:
    """Show each engine-flag group of ``p`` as its spellings on a few lines and a pointer to
    ``kvgate help engine-flags ENGINE``, instead of one help entry per flag (the flags still
    parse; only their ``--help`` lines go)."""
    import textwrap  # noqa: PLC0415

    from kvgate.engines.registry import engine_of_flag_group  # noqa: PLC0415

    for g in p._action_groups:  # the argument groups of engine spellings (kvgate.engines.registry)
        engine = engine_of_flag_group(g.title or "")
        if engine is None or not g._group_actions:
            continue
        names = []
        for a in g._group_actions:
            a.help = argparse.SUPPRESS
            names.append(min(a.option_strings, key=len) if a.option_strings[0].startswith("--") and any(
                not o.startswith("--") for o in a.option_strings) else a.option_strings[0])
        text = f"{', '.join(names)}: as the engine means them; defaults and what each changes: kvgate help engine-flags {engine}"
        g.description = textwrap.fill(text, 78, break_on_hyphens=False, break_long_words=False)
    shown = [a for a in p._actions if a.option_strings and a.help is not argparse.SUPPRESS]
    if len(shown) > 20:  # a usage line per option would fill a screen: the options follow anyway
        pos = " ".join(str(a.metavar or a.dest) for a in p._actions if not a.option_strings
                       and a.help is not argparse.SUPPRESS)
        p.usage = "%(prog)s [OPTIONS]" + (f" {pos}" if pos else "")


def _only(argv: Sequence[str]) -> str | None:
    """The module of the command named first in ``argv`` when it is a known one (else
    ``None``: the full parser, for ``--help`` and for argparse's "choose from" list)."""
    for a in argv:
        if a.startswith("-"):
            return None  # a top-level option (--help, --version) before any command
        mod = a.replace("-", "_")
        return mod if mod in _module_names() else None
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kvgate`` console script. Returns the exit status.

    Ctrl-C at any point (building the parser imports the command's modules) exits 130
    with one ``ERROR: interrupted`` line, never a traceback."""
    as_json = False
    try:
        argv = list(sys.argv[1:] if argv is None else argv)
        as_json = _json_requested(argv)
        return _main(argv)
    except KeyboardInterrupt:
        return _fail("interrupted", None, exit_signal(signal.SIGINT), as_json)


def console_main() -> None:
    """The ``kvgate`` console script: :func:`main`, then exit with its status.

    Once :func:`main` returns, its answer is out: a Ctrl-C during the interpreter's shutdown
    (where Python puts back the default handler, and the signal would end the process as
    ``-2`` with no line) is ignored, so the status stays the answer's. Interrupted (130),
    the process ends at once after its one line."""
    try:
        code = main()
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except KeyboardInterrupt:  # in the instant between main's return and the line above
        sys.stderr.write("ERROR: interrupted\n")
        code = exit_signal(signal.SIGINT)
    if code == exit_signal(signal.SIGINT):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def _main(argv: list[str]) -> int:
    if argv[:1] == ["--version"]:
        print(f"kvgate {version()}")
        return 0
    as_json = _json_requested(argv)
    _Parser.json_errors = as_json
    only = _only(argv)
    # no command named anywhere (``kvgate --help``, ``kvgate bogus``): no command's options are built
    names_only = only is None and not any(a.replace("-", "_") in _module_names() for a in argv)
    parser = build_parser(only, names_only=names_only)
    argv = engine_spellings(parser, argv)
    _Parser.command, _Parser.options = _command_options(parser, argv)
    try:
        args = parser.parse_args(argv)
    except KvgateError as exc:  # a flag's type that raised kvgate's own error
        return _fail(exc.message, exc.hint, exc.exit_code, as_json)
    except (ValueError, OverflowError, ArithmeticError, RecursionError, MemoryError) as exc:  # pragma: no cover
        return _internal(exc, as_json)  # a converter's bug: still one JSON document
    if not getattr(args, "_run", None):
        parser.print_help()
        return EXIT_OK
    import kvgate  # noqa: PLC0415

    if signal.getsignal(signal.SIGINT) is kvgate._interrupted_at_start:  # the start is over: Python's own
        signal.signal(signal.SIGINT, signal.default_int_handler)  # handler (a command sees KeyboardInterrupt)
    try:
        return int(args._run(args) or 0)
    except StdoutError as exc:  # stdout itself failed: the error goes to stderr only
        return _fail(exc.message, exc.hint, exc.exit_code, False)
    except KvgateError as exc:
        return _fail(exc.message, exc.hint, exc.exit_code, as_json)
    except BrokenPipeError:  # e.g. `kvgate ... | head`
        return EXIT_OK
    except OSError as exc:  # e.g. stdout on a full disk: say so, no traceback
        return _fail(f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else ""), None, EXIT_INPUT,
                     as_json)
    except Exception as exc:
        if _caused_by_interrupt(exc):  # Ctrl-C inside an import or a class body, re-raised as another error
            raise KeyboardInterrupt from exc
        return _internal(exc, as_json)


#: commands whose flags are an engine's: ``--max_model_len`` is read as vLLM reads it (a command
#: line to launch, as ``run``/``measure`` take, is never rewritten)
_ENGINE_FLAG_COMMANDS = frozenset({"fit", "tier", "geometry", "gate", "replay", "import-log"})


def _command_options(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[str | None, frozenset[str]]:
    """The command ``argv`` names and its option strings (for a usage error's hint)."""
    for action in parser._actions:
        choices = getattr(action, "choices", None)
        if isinstance(choices, dict) and argv and argv[0] in choices:
            return argv[0], frozenset(o for a in choices[argv[0]]._actions for o in a.option_strings)
    return None, frozenset()


def engine_spellings(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """``argv`` with ``--max_model_len`` / ``--max_model_len=N`` spelled ``--max-model-len``
    where that is one of the command's options, as vLLM's ``FlexibleArgumentParser``
    (``vllm/utils``: ``--foo_bar`` → ``--foo-bar``) reads a pasted command line; only for the
    commands that take engine flags, and never after ``--``."""
    if not argv or argv[0] not in _ENGINE_FLAG_COMMANDS:
        return argv
    known: set[str] = set()
    for action in parser._actions:
        for choice in (getattr(action, "choices", None) or {}).values() if isinstance(
                getattr(action, "choices", None), dict) else ():
            known.update(o for a in choice._actions for o in a.option_strings)
    out: list[str] = []
    for i, a in enumerate(argv):
        if a == "--":
            return out + argv[i:]
        name, eq, value = a.partition("=")
        if a.startswith("--") and "_" in name and name.replace("_", "-") in known:
            a = name.replace("_", "-") + eq + value
        out.append(a)
    return out


def _caused_by_interrupt(exc: BaseException) -> bool:
    """Whether ``exc`` wraps a :class:`KeyboardInterrupt` (Python turns one raised while a class
    is built into ``RuntimeError: Error calling __set_name__ …`` with it as the cause)."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, KeyboardInterrupt):
            return True
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return False


def _internal(exc: Exception, as_json: bool) -> int:
    """A bug in kvgate: under ``--json`` one JSON document first; the traceback follows."""
    if as_json:  # the traceback follows on stderr; stdout still holds one JSON document
        _json_error(f"internal error: {type(exc).__name__}: {exc}"[:500],
                    "a bug in kvgate: please report it with the traceback printed on standard error",
                    EXIT_INTERNAL)
    raise exc
