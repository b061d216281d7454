"""The README and docs/ stay true to the tree: links resolve (to a file, and #anchors to a heading),
every `citadel …` command line names a real command with real options, every `make X` a real target,
every config field named (`section.field`, `CITADEL_SECTION__FIELD`) exists, every repository path
named exists, no page sends a reader outside the repository, and docs/configuration.md's reference
is what citadel/config.py's field descriptions say.

The reference is generated: after changing a config field, run
    .venv/bin/python tests/unit/test_docs.py --write
"""

from __future__ import annotations

import json
import re
import shlex
import sys
import typing
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import pytest
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
CONFIG_PAGE = REPO / "docs" / "configuration.md"
GENERATED_START = "<!-- generated from citadel/config.py: edit the descriptions there, then run " \
                  "`.venv/bin/python tests/unit/test_docs.py --write` -->"
GENERATED_END = "<!-- end of generated reference -->"
# Top-level folders whose paths the pages may name; a named path under one of them must exist.
REPO_ROOTS = ("citadel", "serving", "indexing", "capacity", "cluster", "loadtests", "benchmarks", "tests",
              "examples", "docs", ".ci")
# Build outputs the repository ignores: a page may name them though a clone has none yet.
IGNORED_DIRS = tuple(line.strip() for line in (REPO / ".gitignore").read_text().splitlines()
                     if line.strip().endswith("/") and not re.search(r"[*?\[]", line))
FILE_SUFFIXES = (".py", ".yaml", ".yml", ".json", ".jsonl", ".md", ".sql", ".toml", ".png", ".txt", ".html",
                 ".parquet", ".sqlite", ".token", ".csv")

FENCE = re.compile(r"^\s*```")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
INLINE_CODE = re.compile(r"(`+)(.+?)\1")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
# Shell separators between commands; ` | ` is a pipe, while `a|b` with no spaces is an alternation.
COMMAND_SEPARATORS = re.compile(r";|&&|\|\||\s\|\s|\$\(|\)|`")
CONFIG_NAME = re.compile(r"^([a-z_]+)\.([a-z_][a-z0-9_]*)(\*)?")
CONFIG_ENV = re.compile(r"\bCITADEL_([A-Z0-9_]+?)__([A-Z0-9_]+)")


@dataclass(frozen=True)
class Page:
    path: Path
    prose: list[str]        # lines outside fenced code blocks
    paragraphs: list[str]   # the same, a paragraph a line
    code: list[str]         # lines inside fenced blocks, and inline code spans

    @property
    def name(self) -> str:
        return str(self.path.relative_to(REPO)) if REPO in self.path.parents else self.path.name


def read_page(path: Path) -> Page:
    prose, code, fenced = [], [], False
    for line in path.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif fenced:
            code.append(line)
        else:
            prose.append(line)
    paragraphs = [" ".join(block.split()) for block in "\n".join(prose).split("\n\n")]
    # Inline code and links may wrap across lines, so they are read per paragraph.
    code += [span for paragraph in paragraphs for _, span in INLINE_CODE.findall(paragraph)]
    return Page(path, prose, paragraphs, code)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Page) -> set[str]:
    found, seen = set(), {}
    for line in page.prose:
        match = HEADING.match(line)
        if match:
            base = slug(match.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


# --- links -----------------------------------------------------------------------------------

def broken_links(page: Page, root: Path = REPO) -> list[str]:
    problems = []
    for paragraph in page.paragraphs:
        for target in LINK.findall(INLINE_CODE.sub("", paragraph)):
            if re.match(r"^[a-z]+:", target):
                continue  # http(s), mailto: outside the repository by intent
            file_part, _, anchor = target.partition("#")
            resolved = (page.path.parent / file_part).resolve() if file_part else page.path
            if root not in resolved.parents and resolved != root:
                problems.append(f"{page.name}: {target} leaves the repository")
            elif not resolved.exists():
                problems.append(f"{page.name}: {target} does not exist")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(read_page(resolved)):
                problems.append(f"{page.name}: {target}: no heading with that anchor")
    return problems


# --- commands ---------------------------------------------------------------------------------

def cli_root():
    import typer

    from citadel.cli.main import app

    return typer.main.get_command(app)


def _option_names(command) -> set[str]:
    names = {"--help"}
    for param in command.params:
        names.update(getattr(param, "opts", ()))
        names.update(getattr(param, "secondary_opts", ()))
    return names


def _tokens(segment: str) -> list[str]:
    segment = re.sub(r"(^|\s)#.*", "", segment)
    try:
        return shlex.split(segment)
    except ValueError:
        return segment.split()


def command_segments(code_line: str) -> list[list[str]]:
    return [tokens for part in COMMAND_SEPARATORS.split(code_line) if (tokens := _tokens(part))]


def check_citadel_command(words: list[str], root) -> list[str]:
    """`words` follow `citadel`. Subcommand names (or `a|b` alternatives) must exist; a leaf's
    `--options` must be its own. Placeholders (COMMAND, …) end the check."""
    command, shown = root, ["citadel"]
    for position, word in enumerate(words):
        subcommands = getattr(command, "commands", None)
        if not subcommands:
            return [f"{' '.join(shown)}: no option {option}"
                    for option in _options(words[position:]) if option not in _option_names(command)]
        if not re.fullmatch(r"[a-z][a-z0-9-]*(\|[a-z][a-z0-9-]*)*", word):
            return []  # an option of the group, or a placeholder such as COMMAND
        alternatives = word.split("|")
        missing = [name for name in alternatives if name not in subcommands]
        if missing:
            return [f"{' '.join(shown)}: no command {', '.join(missing)}"]
        if len(alternatives) > 1:
            return []
        command = subcommands[word]
        shown.append(word)
    return []


def _options(tokens: list[str]) -> list[str]:
    options = []
    for token in tokens:
        token = token.strip("[]")
        if token.startswith("--"):
            options.append(token.split("=", 1)[0])
    return options


def makefile_targets() -> set[str]:
    text = (REPO / "Makefile").read_text()
    return set(re.findall(r"^([A-Za-z0-9_.-]+)\s*:(?!=)", text, flags=re.MULTILINE))


def bad_commands(page: Page, root, targets: set[str]) -> list[str]:
    problems = []
    for line in page.code:
        for tokens in command_segments(line):
            for index, token in enumerate(tokens):
                rest = tokens[index + 1:]
                if Path(token).name == "citadel" and rest:
                    problems += [f"{page.name}: {line.strip()!r}: {problem}"
                                 for problem in check_citadel_command(rest, root)]
                elif token == "make" and rest and not rest[0].startswith("-") and rest[0] not in targets:
                    problems.append(f"{page.name}: {line.strip()!r}: no make target {rest[0]}")
    return problems


# --- config fields and repository paths ------------------------------------------------------

def _looks_like_file(name: str) -> bool:
    return "/" in name or name.endswith(FILE_SUFFIXES)


def bad_config_names(page: Page) -> list[str]:
    from citadel.config import CitadelConfig

    sections = {name: field.annotation for name, field in CitadelConfig.model_fields.items()
                if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)}
    problems = []
    for span in page.code:
        match = CONFIG_NAME.match(span)
        if match and match.group(1) in sections and not match.group(3) and not _looks_like_file(span.split()[0]):
            if match.group(2) not in sections[match.group(1)].model_fields:
                problems.append(f"{page.name}: `{span}`: no config field {match.group(1)}.{match.group(2)}")
    named = {found for line in page.code + page.prose for found in CONFIG_ENV.findall(line)}
    for section, field in sorted(named):
        model = sections.get(section.lower())
        if model is None or field.lower() not in model.model_fields:
            problems.append(f"{page.name}: CITADEL_{section}__{field}: no such config field")
    return problems


def _repo_path_candidates(page: Page) -> list[str]:
    candidates = [span for span in page.code if " " not in span.strip()]
    for line in page.code:
        for tokens in command_segments(line):
            candidates += tokens
    paths = [c.strip("[],") for c in candidates if "/" in c]
    return list(dict.fromkeys(path for path in paths if path.split("/")[0] in REPO_ROOTS))


def missing_paths(page: Page) -> list[str]:
    problems = []
    for candidate in _repo_path_candidates(page):
        if re.search(r"[<>{}]|\.\.\.|…", candidate) or candidate.startswith(IGNORED_DIRS):
            continue  # a pattern such as partitions/<tenant>/, or a build output
        if "*" in candidate:
            if not any(REPO.glob(candidate)):
                problems.append(f"{page.name}: {candidate} matches nothing")
        elif not (REPO / candidate).exists():
            problems.append(f"{page.name}: {candidate} does not exist")
    return problems


# --- the configuration reference -------------------------------------------------------------

def _models_in(annotation) -> list[tuple[str, type[BaseModel]]]:
    """The models a field holds, with how a path reaches them: directly, by name in a dict, in a list."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [("", annotation)]
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is dict and len(args) == 2:
        return [(".<name>", model) for suffix, model in _models_in(args[1]) if not suffix]
    if origin is list and args:
        return [("[]", model) for suffix, model in _models_in(args[0]) if not suffix]
    return [found for arg in args for found in _models_in(arg)]


def _default(field) -> str:
    if field.default is not PydanticUndefined:
        value = field.default
    elif field.default_factory is not None:
        value = field.default_factory()
    else:
        return "required"
    if isinstance(value, dict) and value and all(isinstance(v, BaseModel) for v in value.values()):
        return "entries: " + ", ".join(f"`{name}`" for name in value)
    if isinstance(value, Enum):
        value = value.value
    if isinstance(value, Path):
        value = str(value)
    if isinstance(value, BaseModel):
        return "see below"
    return f"`{json.dumps(value, default=str)}`"


DESIGN_REFERENCE = re.compile(r"(,\s*)?DESIGN\.md §[\d.]+(?: steps? [\d-]+)?(?:,\s*§[\d.]+)*")


def _without_design_references(text: str) -> str:
    """The code cites the design notes the project started from; a clone lacks them, so the page
    leaves the citation out."""
    if not DESIGN_REFERENCE.search(text):
        return text
    text = re.sub(r"\(\s*\)", "", DESIGN_REFERENCE.sub("", text))
    return re.sub(r"\s+([.,:;])", r"\1", text)


def _cell(text: str) -> str:
    """One table cell: one line, pipes escaped, and `<…>` outside code shown rather than read as HTML."""
    parts = re.split(r"(`[^`]*`)", " ".join(_without_design_references(text).split()))
    shown = [part if part.startswith("`") else part.replace("<", "&lt;").replace(">", "&gt;") for part in parts]
    return "".join(shown).replace("|", "\\|")


def _table(model: type[BaseModel], path: str) -> tuple[list[str], list[tuple[str, type[BaseModel]]]]:
    lines = ["| field | default | what it does |", "|---|---|---|"]
    nested = []
    for name, field in model.model_fields.items():
        described = field.description or (f"Deprecated: {field.deprecated}" if field.deprecated else "")
        lines.append(f"| `{path}{name}` | {_cell(_default(field))} | {_cell(described)} |")
        nested += [(f"{path}{name}{suffix}", sub) for suffix, sub in _models_in(field.annotation)]
    return lines, nested


def config_reference() -> str:
    """docs/configuration.md's generated part: one table per section, from the field descriptions."""
    from citadel.config import CitadelConfig

    root_rows = ["| field | default | what it does |", "|---|---|---|"]
    sections = []
    for name, field in CitadelConfig.model_fields.items():
        models = _models_in(field.annotation)
        if not models:
            root_rows.append(f"| `{name}` | {_cell(_default(field))} | {_cell(field.description or '')} |")
            continue
        pending = [(name, models[0][1])]
        while pending:
            path, model = pending.pop(0)
            lines, nested = _table(model, f"{path}.")
            doc = _cell(model.__doc__ or "") if model.__doc__ and model.__module__ == "citadel.config" else ""
            sections += [f"### `{path}`", "", *([doc, ""] if doc else []), *lines, ""]
            pending += nested
    body = ["## Reference", "", *root_rows, "", *sections]
    return "\n".join([GENERATED_START, "", *body, GENERATED_END])


def write_config_reference() -> None:
    text = CONFIG_PAGE.read_text()
    head = text.split(GENERATED_START, 1)[0]
    CONFIG_PAGE.write_text(head + config_reference() + "\n")


# --- tests ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pages() -> list[Page]:
    return [read_page(path) for path in PAGES]


def test_there_are_pages_to_check(pages):
    names = {page.name for page in pages}
    assert {"README.md", "docs/configuration.md", "docs/architecture.md", "docs/benchmarks.md"} <= names


def test_every_relative_link_resolves_inside_the_repository(pages):
    assert [problem for page in pages for problem in broken_links(page)] == []


def test_no_page_names_a_file_a_clone_lacks(pages):
    outside = [f"{page.name}: {line.strip()}" for page in pages for line in page.prose + page.code
               if "DESIGN.md" in line or "../shared/DESIGN" in line]
    assert outside == []


def test_every_citadel_and_make_command_exists(pages):
    root, targets = cli_root(), makefile_targets()
    assert [problem for page in pages for problem in bad_commands(page, root, targets)] == []


def test_every_config_field_named_exists(pages):
    assert [problem for page in pages for problem in bad_config_names(page)] == []


def test_every_repository_path_named_exists(pages):
    assert [problem for page in pages for problem in missing_paths(page)] == []


def test_configuration_reference_matches_the_config_descriptions():
    text = CONFIG_PAGE.read_text()
    assert GENERATED_START in text, "docs/configuration.md lost its generated reference"
    shown = GENERATED_START + text.split(GENERATED_START, 1)[1].rstrip("\n")
    assert shown == config_reference(), (
        "docs/configuration.md is out of date: run `.venv/bin/python tests/unit/test_docs.py --write`")


# The checks themselves, on pages made for them: each catches what it exists to catch.

def _page(tmp_path: Path, text: str, name: str = "page.md") -> Page:
    path = tmp_path / name
    path.write_text(text)
    return read_page(path)


def test_the_command_check_catches_unknown_commands_subcommands_and_options():
    root = cli_root()
    assert check_citadel_command(["ask", "--tenant", "acme", "Q?"], root) == []
    assert check_citadel_command(["capacity", "plan|simulate|calibrate"], root) == []
    assert check_citadel_command(["COMMAND", "--help"], root) == []
    assert check_citadel_command(["frobnicate"], root) == ["citadel: no command frobnicate"]
    assert check_citadel_command(["eval", "rag|nope"], root) == ["citadel eval: no command nope"]
    assert check_citadel_command(["ask", "--no-such-flag"], root) == ["citadel ask: no option --no-such-flag"]
    assert command_segments('X=$(citadel token --tenant a); citadel up | tee log') == [
        ["X="], ["citadel", "token", "--tenant", "a"], ["citadel", "up"], ["tee", "log"]]


def test_the_link_check_catches_missing_files_anchors_and_paths_outside(tmp_path):
    (tmp_path / "other.md").write_text("# A heading: with punctuation\n")
    page = _page(tmp_path, "[ok](other.md#a-heading-with-punctuation) [no](missing.md) "
                           "[bad anchor](other.md#nope) [out](../x.md)\n```\n[in code](ignored.md)\n```\n")
    problems = broken_links(page, root=tmp_path)
    assert len(problems) == 3 and "missing.md does not exist" in problems[0]
    assert "no heading" in problems[1] and "leaves the repository" in problems[2]


def test_the_config_and_path_checks_catch_names_that_do_not_exist(tmp_path):
    page = _page(tmp_path, "`serving.port` `serving.no_such_field` `answer.verifier*` `tools.yaml` "
                           "`CITADEL_STATE__NOPE=1` `citadel/config.py` `citadel/nope.py` `cluster/serve/*.yaml`\n")
    assert bad_config_names(page) == [f"{page.name}: `serving.no_such_field`: no config field serving.no_such_field",
                                      f"{page.name}: CITADEL_STATE__NOPE: no such config field"]
    assert missing_paths(page) == [f"{page.name}: citadel/nope.py does not exist"]


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    write_config_reference()
    print(f"wrote {CONFIG_PAGE.relative_to(REPO)}")
