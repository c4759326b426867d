"""Read manifests from files, folders and stdin, keeping the line of every field.

Each YAML document becomes a `Document`: its data (plain dicts and lists, as
yaml.safe_load builds them) and a map from field path to source line, so that every
problem can be reported as FILE:LINE. Nothing here raises on bad input: unreadable
files, YAML syntax errors, duplicate keys and junk bytes come back as problems.
"""

from __future__ import annotations

import bisect
import operator
import re
import sys
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, Iterable, Iterator, cast

import yaml

from fleet.problems import Problem, format_path

Path_ = tuple[Any, ...]
MAX_BYTES = 16 * 1024 * 1024  # one manifest file; a fleet folder may hold many
# The size a document may reach once its aliases are expanded (the "billion laughs" bound): a few aliases
# that repeat a block are fine, a 1 KB document that expands to gigabytes is refused before it is built.
MAX_EXPANDED = MAX_BYTES
# libyaml's parser when PyYAML was built with it (about 10x faster); same nodes, same marks.
_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_SafeLoader):  # type: ignore[misc, valid-type]
    """The safe loader, with each scalar's implicit tag looked up once per stream: the parser asks the resolver
    (Python, a regex per candidate tag) for every node, and manifests repeat a few keys and values (a tenth of
    composing a fleet). A tag depends only on the text and on whether it was quoted when no path resolver is
    registered, as none is for the safe loader: then their hooks, called for every node, are skipped too."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        if self.yaml_path_resolvers:
            return
        tags: dict[str, str] = {}  # a plain scalar's text -> its tag
        # resolving reads only the class's tables: given the class, the loader is not held by its own attribute
        scalar, resolve = yaml.ScalarNode, partial(_SafeLoader.resolve, cast(Any, type(self)))
        # without path resolvers, a map's or a list's tag is its kind's default, and so is a quoted scalar's
        collections = {yaml.MappingNode: self.DEFAULT_MAPPING_TAG, yaml.SequenceNode: self.DEFAULT_SEQUENCE_TAG}
        quoted = self.DEFAULT_SCALAR_TAG

        def resolve_once(kind: Any, value: Any, implicit: Any) -> str:
            if kind is not scalar:
                return collections[kind]
            if not implicit[0]:
                return quoted
            tag = tags.get(value)
            if tag is None:
                tag = tags[value] = resolve(kind, value, implicit)
            return tag

        # the parser looks these up on the loader for every node: the instance's come first. The path hooks do
        # nothing here; builtins that take their arguments and do nothing cost a tenth of a Python function's call
        self.resolve, self.descend_resolver, self.ascend_resolver = resolve_once, operator.is_, tuple


class LineMap:
    """A document's line per field path (the first line of a repeated key; nothing under an alias, whose lines are
    where its anchor is). Most documents are never asked (only a problem names a line), so the one walk notes only
    each key's and list item's line, in the order it meets them, and the map is made the first time it is asked, by
    walking the built data in that same order: the walk made no paths (a tenth of parsing a fleet)."""

    __slots__ = ("_lines", "_pending", "_counted")

    def __init__(self, lines: dict[Path_, int] | None = None, marks: list[int] | None = None, data: Any = None):
        """`marks`: the lines of `data`'s keys and items, depth first (`_build`'s order; an alias is the object it
        repeats, walked once), for data whose every key is a string."""
        self._lines = lines if lines is not None else {}
        self._pending = (marks, data) if marks is not None else None
        self._counted = False  # whether the data was found to have as many keys and items as marks (`_intact`)

    def _intact(self, marks: list[int], data: Any) -> bool:
        """Whether the data still has as many keys and items as it has marks, counted once. Data changed after it
        was parsed (it must not be) then has no lines: a message names the document's first line, never another
        field's."""
        if not self._counted:
            if _marks_under(data, set()) != len(marks):
                self._lines, self._pending = {}, None
                return False
            self._counted = True
        return True

    def read(self) -> dict[Path_, int]:
        pending = self._pending  # read once: the portal's threads may ask at the same time (each makes it alike)
        if pending is not None and self._intact(*pending):
            lines: dict[Path_, int] = {}
            _place_marks(pending[1], iter(pending[0]), lines)
            self._lines = lines
            self._pending = None  # after the map is in place
        return self._lines

    def line_of(self, path: Path_) -> int | None:
        """The line of the deepest part of `path` that has one. Before the map is made, only the marks before the
        path's end are counted (a problem names one field of a document that has hundreds)."""
        pending = self._pending
        if pending is not None and self._intact(*pending):
            return _mark_at(pending[1], path, pending[0])
        lines = self._lines
        while path:
            if path in lines:
                return lines[path]
            path = path[:-1]
        return None


def _mark_at(data: Any, path: Path_, marks: list[int]) -> int | None:
    """`_place_marks`' line for the deepest part of `path` it gives one, without making the others: the marks of
    the keys and items before each step, and of everything under them, are counted."""
    seen: set[int] = set()
    at, found, node = 0, None, data
    for step in path:
        kind = type(node)
        if (kind is not dict and kind is not list) or id(node) in seen:
            break
        seen.add(id(node))
        for key, value in (node.items() if kind is dict else enumerate(node)):
            if key == step and type(key) is type(step):
                found, node = marks[at], value
                at += 1
                break
            at += 1 + _marks_under(value, seen)
        else:
            break
    return found


def _marks_under(data: Any, seen: set[int]) -> int:
    """How many marks `_place_marks` gives what is under `data`: every key and item of each map and list it reaches
    that is not `seen` (an alias met again), whatever order they are counted in. Counted without recursion: a
    document nested as deep as YAML allows must not run out of stack where a problem asks for one line."""
    count, stack = 0, [data]
    while stack:
        node = stack.pop()
        kind = type(node)
        if (kind is not dict and kind is not list) or id(node) in seen:
            continue
        seen.add(id(node))
        count += len(node)
        stack.extend(node.values() if kind is dict else node)
    return count


def _place_marks(data: Any, marks: Iterator[int], lines: dict[Path_, int]) -> None:
    """`data`'s paths given their lines, in `_build`'s order (depth first, without recursion). A map or list met
    again is an alias (`_build` makes a new one for every node): as `_build` did, nothing under it is walked again."""
    if type(data) is not dict and type(data) is not list:
        return
    seen = {id(data)}
    stack: list[tuple[Path_, Iterator]] = [((), iter(data.items() if type(data) is dict else enumerate(data)))]
    while stack:
        path, entries = stack[-1]
        for step, child in entries:
            here = path + (step,)
            lines[here] = next(marks)
            kind = type(child)
            if (kind is dict or kind is list) and id(child) not in seen:
                seen.add(id(child))
                stack.append((here, iter(child.items() if kind is dict else enumerate(child))))
                break
        else:
            stack.pop()


@dataclass
class Document:
    """One object as read: its data is never changed after (its lines are made from it when asked); a caller that
    completes it validates a changed copy (`dataclasses.replace(doc, data=...)`), which keeps the lines."""

    source: str
    line: int
    data: Any
    line_map: LineMap = field(default_factory=LineMap)
    offset: int = 0  # added to `lines`: a document read at another place in another file shares them (ParseMemo)

    @property
    def lines(self) -> dict[Path_, int]:
        return self.line_map.read()

    def line_of(self, path: Iterable[Any]) -> int:
        """The line of the deepest part of `path` that exists in the source."""
        line = self.line_map.line_of(tuple(path))
        return line + self.offset if line is not None else self.line

    def moved(self, source: str, lines: int) -> Document:
        """The same document read `lines` further down in `source` (its data and line map shared, not copied)."""
        return replace(self, source=source, line=self.line + lines, offset=self.offset + lines)


def _walk_lines(node: yaml.Node, path: Path_, lines: dict, seen: set, problems: list, source: str) -> bool:
    """Record each field's line and duplicate keys; True if the document repeats a node through an alias."""
    if id(node) in seen:  # an alias: its lines were recorded where it was defined
        return True
    seen.add(id(node))
    aliased = False
    if isinstance(node, yaml.MappingNode):
        keys: set = set()
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                continue
            here = _note_key(key_node, path, keys, lines, problems, source)
            if id(key_node) in seen:  # a key that is an alias: each use is its whole text again once written out
                aliased = True
            seen.add(id(key_node))
            aliased = _walk_lines(value_node, here, lines, seen, problems, source) or aliased
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            lines.setdefault(path + (index,), item.start_mark.line + 1)
            aliased = _walk_lines(item, path + (index,), lines, seen, problems, source) or aliased
    return aliased


def _note_key(key_node: yaml.ScalarNode, path: Path_, keys: set, lines: dict, problems: list, source: str) -> Path_:
    """Record a mapping key's line (the first, if it repeats) and a repeat as a problem; the field's path."""
    key = key_node.value
    here = path + (key,)
    if key in keys:
        problems.append(Problem(source, key_node.start_mark.line + 1, "", format_path(here), f"duplicate key {key!r}"))
    keys.add(key)
    lines.setdefault(here, key_node.start_mark.line + 1)
    return here


_STR, _MAP, _SEQ = "tag:yaml.org,2002:str", "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"
_PLAIN_SCALARS = frozenset({"tag:yaml.org,2002:null", "tag:yaml.org,2002:bool", "tag:yaml.org,2002:int",
                            "tag:yaml.org,2002:float"})


class _Unusual(Exception):
    """The document needs PyYAML's own constructor: a merge key, a tag other than str, int, float, bool, null, map
    and seq, or an alias inside the node it repeats (a recursive document)."""


class _Built(dict):
    """node -> what `_build` made of it, so an alias is the same object, as PyYAML's constructor makes it
    (`_BUILDING` while a map or list is being filled); `aliases`: the node each alias repeated, keys included.
    Nodes are keyed by identity (yaml's nodes define no equality)."""

    def __init__(self) -> None:
        super().__init__()
        self.aliases: list[yaml.Node] = []
        self.odd_keys = False  # a key that is not a string: its path holds its text, not the built key


_BUILDING = object()
_ScalarNode = yaml.ScalarNode


def _build(loader: Any, node: yaml.Node, built: _Built, scalars: dict, marks: list[int]) -> Any:
    """The document's data, as PyYAML's safe constructor builds it, for documents of plain maps, lists, scalars
    and aliases of them without a repeated key; anything else raises `_Unusual` (and is built the other way, its
    lines and repeated keys recorded by `_walk_lines`). `marks` gets each key's and item's line in the order met
    (`LineMap`). `scalars` keeps each converted scalar (an int, a bool) by its tag and text: manifests repeat a
    few. A string met for the first time (most of a manifest's values) is taken where it stands, without a call."""
    known = built.get(node, built)
    if known is not built:  # an alias: the same object (a document Python's yaml.dump wrote repeats shared ones)
        if known is _BUILDING:
            raise _Unusual
        built.aliases.append(node)
        return known
    cls = node.__class__
    if cls is _ScalarNode:
        tag = node.tag
        if tag == _STR:
            value = built[node] = node.value
            return value
        if tag not in _PLAIN_SCALARS:
            raise _Unusual
        key = (tag, node.value)
        value = scalars.get(key, scalars)
        if value is scalars:
            try:
                value = scalars[key] = loader.yaml_constructors[tag](loader, node)
            except (ValueError, TypeError, OverflowError):
                raise _Unusual from None  # PyYAML's path reports it
        built[node] = value
        return value
    if cls is yaml.MappingNode and node.tag == _MAP:
        built[node] = _BUILDING
        mapping: dict = {}
        keys: set = set()
        for key_node, value_node in node.value:
            if key_node.__class__ is not _ScalarNode:
                raise _Unusual
            text = key_node.value
            if text in keys:  # a repeated key: `_walk_lines` reports it where it is
                raise _Unusual
            keys.add(text)
            marks.append(key_node.start_mark.line + 1)
            if key_node.tag == _STR:
                key = text
                if key_node in built:  # an alias as a key: measured as any alias is
                    built.aliases.append(key_node)
                built[key_node] = key
            else:
                key = _build(loader, key_node, built, scalars, marks)
                built.odd_keys = True
            if value_node.__class__ is _ScalarNode and value_node.tag == _STR and value_node not in built:
                mapping[key] = built[value_node] = value_node.value
            else:
                mapping[key] = _build(loader, value_node, built, scalars, marks)
        built[node] = mapping
        return mapping
    if cls is yaml.SequenceNode and node.tag == _SEQ:
        built[node] = _BUILDING
        sequence = []
        for item in node.value:
            marks.append(item.start_mark.line + 1)
            if item.__class__ is _ScalarNode and item.tag == _STR and item not in built:
                sequence.append(item.value)
                built[item] = item.value
            else:
                sequence.append(_build(loader, item, built, scalars, marks))
        built[node] = sequence
        return sequence
    raise _Unusual


def expanded_size(node: yaml.Node, sizes: dict[int, int]) -> int:
    """Roughly the bytes of the document's JSON once every alias is expanded, without expanding anything:
    each node's size is computed once and shared by the aliases that repeat it."""
    known = sizes.get(id(node))
    if known is not None:
        return known
    if isinstance(node, yaml.MappingNode):
        size = 2 + sum(expanded_size(k, sizes) + expanded_size(v, sizes) + 2 for k, v in node.value)
    elif isinstance(node, yaml.SequenceNode):
        size = 2 + sum(expanded_size(item, sizes) + 1 for item in node.value)
    else:
        size = len(node.value) + 2
    sizes[id(node)] = size
    return size


def _is_list(data: Any) -> bool:
    """What `kubectl get ... -o yaml` writes (`v1/List`) and what an API answers a list with (`<Kind>List`)."""
    kind = data.get("kind") if isinstance(data, dict) else None
    return isinstance(kind, str) and kind.endswith("List") and isinstance(data.get("items"), list) \
        and set(data) <= {"apiVersion", "kind", "metadata", "items"}


def _items(doc: Document) -> list[Document]:
    """A list document read item by item, each with its own lines, as `kubectl apply -f` reads it; any other
    document as it is."""
    if not _is_list(doc.data):
        return [doc]
    out = []
    for index, item in enumerate(doc.data["items"]):
        prefix = ("items", index)
        lines = {path[2:]: line for path, line in doc.lines.items() if path[:2] == prefix and len(path) > 2}
        out.append(Document(doc.source, doc.lines.get(prefix, doc.line), item, LineMap(lines)))
    return out


# A line that starts a YAML document and holds nothing else. Without directives (%YAML, %TAG) nothing carries from
# one document of a stream to the next, so the text between two such lines parses alone as it does in the stream
# (`learn` still checks that every document read lies between two of them).
# matched at the start of a line: `---`, then the line's end or whitespace (a `#` starts a comment only after
# whitespace: `---#x` is text)
_DOCUMENT_START = re.compile(r"---(?:[ \t]+(?:#[^\n]*)?)?\r?(?:\n|\Z)")
_LONE_CR = re.compile(r"\r(?!\n)")


def _line_start(text: str, after: int) -> int:
    """Where the next line that begins with `---` begins, after `after`; -1 if none does."""
    found = text.find("\n---", after)
    return found + 1 if found >= 0 else -1


def _not_split(text: str) -> bool:
    """Directives, or line breaks other than \\n and \\r\\n (YAML counts NEL, LS, PS and a lone CR as lines too).
    Plain substring tests: a regex with these alternatives took 25 ms on a 1.6 MB fleet."""
    return (text.startswith("%") or "\n%" in text or "\x85" in text or "\u2028" in text or "\u2029" in text
            or ("\r" in text and _LONE_CR.search(text) is not None))
_START = "---\n"  # a document-start line, as put back between stretches parsed together


@dataclass
class ParseMemo:
    """Documents read before in this process, by the text between two document-start lines: a comparison's base
    and head share every document but those the change touched, and each is parsed once. Only text that parsed
    without a problem is kept; what is reused is the same data and line map, placed at its new line."""

    chunks: dict[str, tuple[int, list[Document]]] = field(default_factory=dict)  # text -> (first line, documents)

    @staticmethod
    def split(text: str) -> list[tuple[int, str]] | None:
        """(first line, 0-based; text) of each stretch from a document-start line to the next, the start line
        written as `---`, so that stretches alike but for a comment on that line are one; None when the text has
        directives or unusual line breaks. The stretches written one after another read as the text does, line for
        line."""
        if _not_split(text):
            return None
        out, begin, line, start = [], 0, 0, ""
        at = 0 if text.startswith("---") else _line_start(text, 0)
        while at >= 0:
            marker = _DOCUMENT_START.match(text, at)
            if marker is not None:
                chunk = start + text[begin:at]
                out.append((line, chunk))
                line += chunk.count("\n")
                begin, start = marker.end(), _START
            at = _line_start(text, at)
        out.append((line, start + text[begin:]))
        return out

    def learn(self, chunks: list[tuple[int, str]], spans: list[tuple[int, int, list[Document]]]) -> None:
        """Keep each stretch whose documents were all read within it (`spans`: first and last line of each
        document read from the stretches' text, with what it became)."""
        firsts = [first for first, _ in chunks]
        found: dict[int, list[Document]] = {i: [] for i in range(len(chunks))}
        for first, last, documents in spans:
            i = bisect.bisect_right(firsts, first) - 1
            j = bisect.bisect_right(firsts, last) - 1
            if i != j:  # across start lines, or an empty document: none of the stretches it may be in is kept
                for k in range(min(i, j), max(i, j) + 1):
                    found.pop(k, None)
                continue
            if i in found:
                found[i] += documents
        for i, documents in found.items():
            first, chunk = chunks[i]
            self.chunks.setdefault(chunk, (first, documents))


def parse_text(text: str, source: str, max_expanded: int = MAX_EXPANDED,
               memo: ParseMemo | None = None) -> tuple[list[Document], list[Problem]]:
    """Parse multi-document YAML text into documents; never raises. A document whose aliases expand it beyond
    `max_expanded` bytes is a problem, found before anything expands it. `memo`: documents read before are
    reused, not parsed again (the answer is the one parsing gives)."""
    chunks = memo.split(text) if memo is not None else None
    if memo is None or chunks is None:
        return _parse(text, source, max_expanded)[:2]
    known = [memo.chunks.get(chunk) for _, chunk in chunks]
    if not any(known):
        documents, problems, spans = _parse(text, source, max_expanded)
        if not problems:
            memo.learn(chunks, spans)
        return documents, problems
    documents = []
    i = 0
    while i < len(chunks):
        if (found := known[i]) is not None:
            was, reused = found
            documents += [d.moved(source, chunks[i][0] - was) for d in reused]
            i += 1
            continue
        j = i
        while j < len(chunks) and known[j] is None:
            j += 1
        run = chunks[i:j]
        parsed, problems, spans = _parse("".join(chunk for _, chunk in run), source, max_expanded)
        if problems:  # the whole text, as without a memo: which problems a broken stream reports depends on it
            return _parse(text, source, max_expanded)[:2]
        start = run[0][0]
        documents += [d.moved(source, start) for d in parsed]
        memo.learn([(first - start, chunk) for first, chunk in run], spans)
        i = j
    return documents, []


def _parse(text: str, source: str, max_expanded: int) -> tuple[list[Document], list[Problem], list[tuple]]:
    """`parse_text`'s documents and problems, and the span of each YAML document: (first line, last line, the
    documents it became), lines 0-based."""
    problems: list[Problem] = []
    documents: list[Document] = []
    spans: list[tuple[int, int, list[Document]]] = []
    scalars: dict = {}
    loader = None
    try:
        loader = _Loader(text)  # the pure-Python reader rejects control characters already here
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            start = node.start_mark
            built = _Built()
            marks: list[int] = []
            try:
                data = _build(loader, node, built, scalars, marks)
            except _Unusual:
                lines: dict[Path_, int] = {}
                found: list[Problem] = []
                # the walk visits each node once, aliases or not; only a document with aliases can expand beyond
                # its text (bounded by MAX_BYTES), so only such a document is measured, before any of it is built
                if _walk_lines(node, (), lines, set(), found, source) and \
                        (refused := _expands_too_far(node, source, max_expanded)) is not None:
                    problems.append(refused)
                    continue
                problems += found
                data = loader.construct_document(node)
                line_map = LineMap(lines)
            else:
                # built with each alias as one shared object, never expanded: measured before anything expands it
                if built.aliases and (refused := _expands_too_far(node, source, max_expanded, built.aliases)) is not None:
                    problems.append(refused)
                    continue
                if built.odd_keys:  # the built data's keys are not the text's: walk the nodes for the lines
                    lines = {}
                    _walk_lines(node, (), lines, set(), [], source)  # no problems: `_build` refused repeated keys
                    line_map = LineMap(lines)
                else:
                    line_map = LineMap(None, marks, data)
            items = _items(Document(source, start.line + 1, data, line_map))
            documents += items
            end = node.end_mark
            # an empty document's node has no length: it sits where the next token starts, maybe in the stretch
            # after its own, so it is given no lines at all (`learn` keeps neither stretch)
            last = start.line - 1 if end.index == start.index else \
                end.line - 1 if end.column == 0 and end.line else end.line
            spans.append((start.line, last, items))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        problems.append(Problem(source, line, "", "", f"YAML syntax error: {unquoted(exc.problem or exc.context or '')}"))
    except yaml.YAMLError as exc:  # ReaderError: control characters, bad encoding
        problems.append(Problem(source, 1, "", "", f"not readable as YAML: {yaml_problem(exc)}"))
    except RecursionError:
        problems.append(Problem(source, 1, "", "", "YAML nesting is too deep"))
    except (ValueError, TypeError, OverflowError) as exc:  # a scalar the constructor could not build
        problems.append(Problem(source, 1, "", "", f"YAML value error: {_one_line(exc)}"))
    finally:
        if loader is not None:
            loader.dispose()
    return documents, problems, spans


# Written out, a document's nodes other than its aliases take at most this many bytes per character of its text
# (a scalar its value and 2, never more than its text; an entry 2, a list item 1, a container 2: `{a: }` is 5
# characters, 2 + 3 + 2 + 2 bytes); 4 would do.
_BYTES_PER_CHARACTER = 8


def _expands_too_far(node: yaml.Node, source: str, max_expanded: int,
                     aliases: list[yaml.Node] | None = None) -> Problem | None:
    """A problem when the document's size once every alias is expanded (`expanded_size`) is beyond `max_expanded`.
    `aliases` (each node an alias repeated, as `_build` met them): when the document's own text and what its
    aliases add are surely within the bound, it is not measured node by node."""
    sizes: dict[int, int] = {}
    if aliases is not None:
        own = _BYTES_PER_CHARACTER * (node.end_mark.index - node.start_mark.index) + 16
        if own + sum(expanded_size(n, sizes) for n in aliases) <= max_expanded:
            return None
    size = expanded_size(node, sizes)
    if size <= max_expanded:
        return None
    return Problem(source, node.start_mark.line + 1, "", "",
                   f"the document expands to about {size:,} bytes through YAML aliases (at most {max_expanded:,}): "
                   "refused")


_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")


def unquoted(message: str) -> str:
    """PyYAML's message without the text it quotes (a tag, a key, a scalar: on a Secret's or a token's line, the
    secret); its own names ('<block end>') and single characters ('\\t') stay."""
    return _QUOTED.sub(lambda m: m[0] if len(m[0]) <= 5 or m[0][1:2] == "<" else "'...'", message)


def yaml_problem(exc: yaml.YAMLError) -> str:
    """Where and what, never the text: str(exc) quotes the offending line, which in a tokens file or a kubeconfig
    holds a token or a key."""
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        what = unquoted(" ".join(w for w in (exc.context, exc.problem) if w) or "a syntax error")
        return f"line {mark.line + 1}, column {mark.column + 1}: {what}" if mark else what
    if isinstance(exc, yaml.reader.ReaderError):
        return f"character {exc.position + 1}: {exc.reason} (a control character, or not UTF-8)"
    return type(exc).__name__


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:200]


def _decode(raw: bytes, source: str) -> tuple[str | None, list[Problem]]:
    if len(raw) > MAX_BYTES:
        return None, [Problem(source, 1, "", "", f"file is larger than {MAX_BYTES // (1024 * 1024)} MiB")]
    if b"\x00" in raw:
        return None, [Problem(source, 1, "", "", "binary file (contains NUL bytes), not YAML")]
    try:
        return raw.decode("utf-8-sig"), []
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        return None, [Problem(source, line, "", "", "file is not UTF-8 text")]


RENDER_MARKER = ".modelplane-render"  # the file `render --out` writes into its folder (workloads/output.py)
# A folder holding this file is another variant of the fleet around it (examples/v0.3/: the v0.3.1 shapes of some
# examples): read when it is named, skipped when a folder above it is read, where its objects would be duplicates.
VARIANT_MARKER = ".modelplane-variant"


def _expand(path: str) -> tuple[list[Path], list[Problem]]:
    p = Path(path)
    if p.is_dir():
        # folders `modelplane render` wrote (they hold its marker file) are output, not manifests: skipped; so are
        # variants below the folder read
        rendered = {m.parent for m in p.rglob(RENDER_MARKER)} | {m.parent for m in p.rglob(VARIANT_MARKER)
                                                                  if m.parent != p}
        files = sorted(
            f for f in p.rglob("*")
            if f.is_file() and f.suffix in (".yaml", ".yml") and not any(part.startswith(".") for part in f.relative_to(p).parts)
            and not any(folder == f.parent or folder in f.parents for folder in rendered)
        )
        return files, []
    if p.is_file():
        return [p], []
    if p.exists():
        return [], [Problem(path, 0, "", "", "not a regular file or folder")]
    return [], [Problem(path, 0, "", "", "no such file or folder")]


@dataclass(frozen=True)
class Source:
    """One file's bytes as read (or standard input's), or why a path could not be read."""

    name: str
    raw: bytes | None
    problems: tuple[Problem, ...] = ()


def read_sources(paths: Iterable[str], stdin: Any = None) -> list[Source]:
    """The bytes of every file under `paths` ("-" is standard input), in a stable order."""
    sources: list[Source] = []
    for path in paths:
        if path == "-":
            stream = stdin if stdin is not None else sys.stdin
            raw = stream.buffer.read(MAX_BYTES + 1) if hasattr(stream, "buffer") else stream.read(MAX_BYTES + 1)
            if isinstance(raw, str):
                raw = raw.encode("utf-8", errors="surrogateescape")
            sources.append(Source("<stdin>", raw))  # past MAX_BYTES, _decode refuses it: nothing more is read
            continue
        files, found = _expand(path)
        if found:
            sources.append(Source(path, None, tuple(found)))
        for f in files:
            try:
                with f.open("rb") as opened:  # at most one byte past the limit: a huge file is refused, not loaded
                    sources.append(Source(str(f), opened.read(MAX_BYTES + 1)))
            except OSError as exc:
                sources.append(Source(str(f), None, (Problem(str(f), 0, "", "", f"cannot read: {exc.strerror or exc}"),)))
    return sources


def parse_sources(sources: Iterable[Source], memo: ParseMemo | None = None) -> tuple[list[Document], list[Problem]]:
    documents: list[Document] = []
    problems: list[Problem] = []
    for source in sources:
        problems += source.problems
        if source.raw is None:
            continue
        text, bad = _decode(source.raw, source.name)
        problems += bad
        if text is not None:
            docs, bad = parse_text(text, source.name, memo=memo)
            documents += docs
            problems += bad
    return documents, problems


def load_paths(paths: Iterable[str], stdin: Any = None,
               memo: ParseMemo | None = None) -> tuple[list[Document], list[Problem]]:
    """Load every document under `paths` ("-" is standard input), in a stable order."""
    return parse_sources(read_sources(paths, stdin), memo)
