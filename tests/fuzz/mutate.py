# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The generators: a valid example, mutated into the inputs an attacker would write.

Everything here draws from one ``random.Random`` (the input's own, seeded by the run's seed, the
target and the input's number), so an input is made again, byte for byte, from those three.

* ``mutate_value``: structure-aware changes to parsed data (a value at a random place of the example
  replaced by a hostile one, a wrong type, a key dropped, renamed or added, a list multiplied, a value
  nested deeply);
* ``to_text``: data as JSON text, compact or indented, ASCII or not, with what ``json.dumps`` cannot
  write: ``Raw`` text spliced in (10 000-digit integers, 100 000 levels of brackets, ``1e99999``) and
  ``Pairs`` (an object with a key given twice);
* ``mutate_bytes`` and ``mutate_lines``: truncation, byte flips, non-UTF-8, a BOM, NUL, CRLF, lines
  dropped, doubled or swapped;
* ``yaml_text``: what only YAML can say (aliases, tags, merge keys, several documents);
* ``FS_ATTACKS``: what the file system can put where a file should be (a FIFO, a link to ``/dev/zero``,
  a directory, a socket, a sparse file of a gigabyte, a file another account owns).
"""

from __future__ import annotations

import copy
import json
import math
import os
import socket
import stat


class Raw(object):
    """JSON text spliced into a document as it is (what no Python value serialises to)."""

    __slots__ = ("text",)

    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return "Raw(%r%s)" % (self.text[:40], "..." if len(self.text) > 40 else "")


class Pairs(object):
    """A JSON object with its pairs in order, a key possibly given twice."""

    __slots__ = ("pairs",)

    def __init__(self, pairs):
        self.pairs = pairs

    def __repr__(self):
        return "Pairs(%r)" % (self.pairs[:4],)


HUGE_DIGITS = 10000
BIG_INTS = [0, 1, -1, 2, 7, 255, 256, 1023, 1024, 1025, 4096, 8191, 8192, 65535, 2 ** 31 - 1, 2 ** 31, 2 ** 32,
            2 ** 53 + 1, 2 ** 63 - 1, 2 ** 63, -2 ** 63, -2 ** 63 - 1, 2 ** 64, 10 ** 19, 10 ** 20, 10 ** 40, 10 ** 41,
            -10 ** 40]
FLOATS = [0.0, -0.0, 0.5, 1.5, 1e308, -1e308, 5e-324, 2.0 ** 63, 1e19, float("nan"), float("inf"), float("-inf")]
CHARS = ["\x00", "\x01", "\x07", "\x08", "\t", "\n", "\x0b", "\x0c", "\r", "\x1b", "\x1c", "\x1d", "\x1e", "\x1f",
         "\x7f", "\x80", "\x85", "\x9b", "\xa0", "\u2028", "\u2029", "\u200b", "\u200e", "\u202a", "\u202e",
         "\u2066", "\u2069", "\ufeff", "\ufffd", "\ud800", "\udc00", "\udfff", "\U0010ffff", "\U0001f600", "\u0130",
         "\u212a", "\xdf", "\u0301", "/", "\\", '"', "'", "=", ":", ",", ";", "$", "`", "%", "*", "?", "[", "{", " "]
STRINGS = ["", " ", "\x00", "a\nb", "a\rb", "\x1b[2J\x1b[H\x1b[31mFREE", "\x1b]0;owned\x07", "\x9b31m", ".", "..",
           "../../../etc/passwd", "/", "/etc/shadow", "a/b", "%s%n%x", "${PATH}", "$(id)", "`id`", "null", "true",
           "0", "-1", "1e999", "NaN", "Infinity", "GPU-", "MIG-", "GPU-5f1c2a90-0000-4000-8000-000000000002/gi1/ci0",
           "GPU-5f1c2a90-0000-4000-8000-000000000002/s99999999999999999999", "GPU-5f1c2a90-0000-4000-8000-00000000000",
           "gpu-5f1c2a90-0000-4000-8000-000000000002", "bcd.dev/gpu=GPU-x", "LD_PRELOAD=/tmp/x.so", "PATH=/tmp",
           "BASH_ENV=/tmp/x", "PYTHONPATH=/tmp", "NVIDIA_VISIBLE_DEVICES=all", "BCD_X=1", "A=\x0bB", "A=\u2028",
           "A=B\x85C", "K\u212aY=1", "\u0130D=1", "0-8191", "0-8192", "0-99999999999", "1,1,1", "3-1", "0-1023",
           "BINDING_HOLD", "BINDING_KUBERNETES", "BINDING_UNSPECIFIED", "gpu", "gpu.mig", "gpu.slot", "cdi",
           "allocation-env", "hold.write", "kube.look", "auto", "running", "shut off"]
LONG_LENGTHS = [81, 129, 257, 513, 4097, 65537, 1 << 20]
DEPTHS = [17, 63, 64, 65, 200, 1000, 100000]
COUNTS = [2, 3, 17, 64, 257, 1024, 1025, 2049, 5000]
BYTE_INSERTS = [b"\x00", b"\xff", b"\xfe", b"\xc0\x80", b"\xc3\x28", b"\xed\xa0\x80", b"\xef\xbb\xbf", b"\xe2\x80\xa8",
                b"\r", b"\n", b"\r\n", b"\x1b[2J", b'"', b"{", b"[", b"]", b"}", b",", b":", b"\\", b"\\u0000",
                b"\\ud800", b"\\udfff", b"NaN", b"-Infinity", b"1e99999", b"9" * 50, b" " * 4096]
WHOLE = [b"", b" ", b"\n", b"\x00", b"null", b"true", b"0", b"-1", b"[]", b"{}", b'""', b"[{}]", b"NaN", b"\xef\xbb\xbf",
         b"\xff\xfe{\x00}\x00", b"{" * 10, b"[" * 100000, b'{"": 1, "": 2}', b"7" * HUGE_DIGITS]


def clone(value):
    """A deep copy; the value itself when it nests too deeply to copy (a deep value made earlier)."""
    try:
        return copy.deepcopy(value)
    except RecursionError:
        return value


def huge_int(rng):
    """A Python integer of 300 to 4 300 digits (what ``json.loads`` on Python 3.11 still turns into one);
    built without a decimal conversion, which Python refuses past 4 300 digits."""
    return rng.choice([1, -1]) * 7 * 10 ** rng.choice([300, 1000, 4299])


def long_string(rng, base="x"):
    return (base or "x") * rng.choice(LONG_LENGTHS)


def deep_value(rng, text, depth=None):
    """A list (or mapping) nested ``depth`` levels; as ``Raw`` text when ``text`` (no Python value that
    deep can be serialised, or passed around, without recursion)."""
    depth = depth or rng.choice(DEPTHS)
    if text:
        if rng.random() < 0.5:
            return Raw("[" * depth + "]" * depth)
        return Raw('{"a":' * depth + "null" + "}" * depth)
    depth = min(depth, 900)  # what survives Ansible's own parse of the module's arguments
    value = []  # type: list
    for _level in range(depth):
        value = [value] if rng.random() < 0.7 else {"a": value}
    return value


def nasty_string(rng, base=""):
    """A string from ``base``: a hostile character put in, a known bad string, or a long one."""
    roll = rng.random()
    if roll < 0.3 or not base:
        return rng.choice(STRINGS) if rng.random() < 0.7 else "".join(rng.choice(CHARS) for _count in range(rng.randint(1, 6)))
    if roll < 0.65:
        at = rng.randint(0, len(base))
        return base[:at] + "".join(rng.choice(CHARS) for _count in range(rng.randint(1, 3))) + base[at:]
    if roll < 0.75:
        return long_string(rng, base[:1])
    if roll < 0.85:  # repeated, never past the longest of LONG_LENGTHS (a long base times 100 was 100 MB of input)
        return base * max(1, min(rng.choice([2, 10, 100]), LONG_LENGTHS[-1] // max(1, len(base))))
    if roll < 0.92:
        return base.swapcase()
    return base[:rng.randint(0, len(base))]


def nasty_value(rng, text, like=None):
    """A hostile value; ``text`` when it will be written as JSON text (``Raw`` allowed), else a Python value
    as parsed JSON would give it. ``like`` (the value it replaces) shapes some choices."""
    roll = rng.random()
    if roll < 0.18:
        value = rng.choice(BIG_INTS)
        if isinstance(like, int) and not isinstance(like, bool) and rng.random() < 0.5:
            value = like + rng.choice([-1, 1, 2 ** 63, -2 ** 64])
        return value
    if roll < 0.26:
        if text:
            digits = rng.choice(["7" * HUGE_DIGITS, "1" + "0" * 4300, "9" * 41, "-" + "9" * HUGE_DIGITS])
            return Raw(digits)
        return huge_int(rng)
    if roll < 0.34:
        if text and rng.random() < 0.4:
            return Raw(rng.choice(["NaN", "Infinity", "-Infinity", "1e99999", "-1e99999", "1" + "0" * 400 + ".5",
                                   "0." + "0" * 5000 + "1", "1E400", "-0", "1.0e-400", "1" * 65 + ".0"]))
        return rng.choice(FLOATS)
    if roll < 0.40:
        return rng.choice([None, True, False])
    if roll < 0.62:
        return nasty_string(rng, like if isinstance(like, str) else "")
    if roll < 0.70:
        return deep_value(rng, text)
    if roll < 0.78:
        return rng.choice([[], {}, [None], [like], {"": like}, {"a": 1}, [[]], [{}]])
    if roll < 0.86:
        if isinstance(like, (list, dict)) and like:
            return clone(like)
        return [clone(like)] * min(rng.choice(COUNTS), MAX_NODES // max(1, size_of(like)))
    if roll < 0.92:
        return str(like) if not isinstance(like, str) else (int(like) if like.isdigit() and len(like) < 30 else [like])
    return long_string(rng, rng.choice(["x", "\u2028", "\x1b", "/", "\ud800", "\u00e9"]))


# -- where in a value ------------------------------------------------------------------

def places(value, limit=400):
    """Paths (tuples of keys and indexes) to the values inside ``value``, breadth first, at most ``limit``."""
    found, queue = [()], [((), value)]
    while queue and len(found) < limit:
        path, item = queue.pop(0)
        if isinstance(item, dict):
            children = list(item.items())
        elif isinstance(item, list):
            children = list(enumerate(item[:64]))
        else:
            continue
        for key, child in children:
            found.append(path + (key,))
            queue.append((path + (key,), child))
    return found


def get_at(value, path):
    for key in path:
        value = value[key]
    return value


def set_at(value, path, new):
    if not path:
        return new
    get_at(value, path[:-1])[path[-1]] = new
    return value


def _keys(rng, container):
    if isinstance(container, dict):
        return list(container)
    return list(range(len(container)))


MAX_NODES = 50000  # values in an input: a list multiplied once more would make inputs of gigabytes


def size_of(value, limit=MAX_NODES):
    """How many values ``value`` holds, counted up to ``limit``; a string (or ``Raw`` text, a key) counts a
    value more for each 64 characters. Every container kind to_text writes is walked: a ``Pairs`` of
    megabyte strings counted as one value was multiplied 2 049 times into 2 GB of input."""
    count, pending = 0, [value]
    while pending and count < limit:
        item = pending.pop()
        count += 1
        if isinstance(item, dict):
            pending.extend(item.values())
            pending.extend(key for key in item if isinstance(key, str))
        elif isinstance(item, Pairs):
            pending.extend(child for pair in item.pairs for child in pair)
        elif isinstance(item, (list, tuple)):
            pending.extend(item)
        elif isinstance(item, str):
            count += len(item) // 64
        elif isinstance(item, Raw):
            count += len(item.text) // 64
    return count


def mutate_once(rng, value, text, keys=()):
    """One structure-aware change to ``value`` (changed in place where it can be; the result returned).
    ``keys`` are names the target knows (unknown keys are drawn from them and from hostile ones)."""
    spots = places(value)
    path = rng.choice(spots[1:]) if len(spots) > 1 and rng.random() > 0.03 else ()  # the whole value, seldom
    target = get_at(value, path)
    roll = rng.random()
    if roll < 0.45 or not path:
        return set_at(value, path, nasty_value(rng, text, target))
    parent = get_at(value, path[:-1])
    key = path[-1]
    if roll < 0.55:  # drop it
        if isinstance(parent, dict):
            del parent[key]
        else:
            del parent[key]
        return value
    if roll < 0.63 and isinstance(parent, dict):  # a key renamed, or an unknown one added
        new_key = rng.choice(list(keys) + [key.upper() if isinstance(key, str) else "x", "", " ", "\x00",
                                           str(key) + "\u200b", "__proto__", nasty_string(rng, str(key))])
        if rng.random() < 0.5:
            parent[new_key] = parent.pop(key)
        else:
            parent[new_key] = nasty_value(rng, text, target)
        return value
    if roll < 0.70 and isinstance(parent, dict) and text:  # the key given twice
        pairs = list(parent.items()) + [(key, nasty_value(rng, text, target) if rng.random() < 0.7 else target)]
        if len(path) == 1:
            return Pairs(pairs)
        return set_at(value, path[:-1], Pairs(pairs))
    if roll < 0.80 and isinstance(parent, list) and size_of(value) * 2 < MAX_NODES:  # a list multiplied
        times = min(rng.choice(COUNTS), MAX_NODES // max(1, size_of(target)))
        parent.extend(clone(target) for _count in range(times))
        return value
    if roll < 0.88:  # wrapped
        return set_at(value, path, rng.choice([[target], {"value": target}, {str(key): target}]))
    if isinstance(target, str):
        return set_at(value, path, nasty_string(rng, target))
    return set_at(value, path, nasty_value(rng, text, target))


def mutate_value(rng, value, text, keys=(), rounds=None):
    """``value`` (a deep copy) changed ``rounds`` times (1 to 3 by default)."""
    value = clone(value)
    for _round in range(rounds or rng.choice([1, 1, 1, 2, 3])):
        if isinstance(value, (Raw, Pairs)):
            break
        value = mutate_once(rng, value, text, keys)
    return value


# -- as text -----------------------------------------------------------------------------

def _string(value, ascii_only):
    return json.dumps(value, ensure_ascii=ascii_only)


def _number(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return repr(value)


def to_text(value, ascii_only=True, indent=None):
    """``value`` as JSON text (``Raw`` and ``Pairs`` included); iterative, so any depth of Python value."""
    out = []
    stack = [("value", value, 0)]
    sep = ", " if indent is None else ","
    while stack:
        kind, item, level = stack.pop()
        if kind == "text":
            out.append(item)
            continue
        if isinstance(item, Raw):
            out.append(item.text)
        elif item is None:
            out.append("null")
        elif isinstance(item, (bool, int, float)):
            out.append(_number(item))
        elif isinstance(item, str):
            out.append(_string(item, ascii_only))
        elif isinstance(item, (dict, Pairs, list, tuple)):
            if isinstance(item, dict):
                entries = list(item.items())
            elif isinstance(item, Pairs):
                entries = list(item.pairs)
            else:
                entries = [(None, child) for child in item]
            opener, closer = ("[", "]") if isinstance(item, (list, tuple)) else ("{", "}")
            if not entries:
                out.append(opener + closer)
                continue
            pad = "" if indent is None else "\n" + " " * (indent * (level + 1))
            end = "" if indent is None else "\n" + " " * (indent * level)
            parts = [("text", closer if not end else end + closer, level)]
            for position in range(len(entries) - 1, -1, -1):
                key, child = entries[position]
                parts.append(("value", child, level + 1))
                prefix = pad if position == 0 else sep + pad
                if key is not None:
                    prefix += _string(str(key), ascii_only) + ": "
                parts.append(("text", prefix, level))
            out.append(opener)
            stack.extend(parts)
        else:
            out.append(_string(str(item), ascii_only))
    return "".join(out)


def encode(text, rng):
    """Text as bytes: UTF-8, lone surrogates written as they are (CESU, not UTF-8) or replaced."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass" if rng.random() < 0.7 else "replace")


def dumps(rng, value):
    """``value`` as the bytes of a JSON file, in a style drawn from ``rng``."""
    text = to_text(value, ascii_only=rng.random() < 0.5, indent=rng.choice([None, None, 2, 1]))
    if rng.random() < 0.3:
        text += "\n"
    return encode(text, rng)


# -- bytes and lines ---------------------------------------------------------------------

def mutate_bytes(rng, data):
    """One byte-level change: truncated, bytes flipped, bad bytes put in, a slice dropped or doubled, the
    whole replaced, a BOM, CRLF line ends, UTF-16."""
    roll = rng.random()
    if roll < 0.2 and data:
        return data[:rng.randint(0, len(data) - 1)]
    if roll < 0.35 and data:
        out = bytearray(data)
        for _flip in range(rng.choice([1, 1, 2, 8])):
            out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
        return bytes(out)
    if roll < 0.55:
        at = rng.randint(0, len(data))
        return data[:at] + rng.choice(BYTE_INSERTS) + data[at:]
    if roll < 0.63 and data:
        start = rng.randrange(len(data))
        end = min(len(data), start + rng.choice([1, 4, 64, 4096]))
        return data[:start] + data[end:]
    if roll < 0.71 and data and len(data) < (8 << 20):
        start = rng.randrange(len(data))
        end = min(len(data), start + rng.choice([1, 8, 256]))
        return data[:end] + data[start:end] * rng.choice([1, 2, 100]) + data[end:]
    if roll < 0.79:
        return rng.choice(WHOLE)
    if roll < 0.83:
        return b"\xef\xbb\xbf" + data
    if roll < 0.87:
        return data.replace(b"\n", b"\r\n") if b"\n" in data else data + b"\r\n"
    if roll < 0.90:
        try:
            return data.decode("utf-8").encode(rng.choice(["utf-16", "utf-32", "latin-1"]), "replace")
        except UnicodeDecodeError:
            return data[::-1]
    if roll < 0.95 and len(data) < (8 << 20):
        return data + data[:rng.randint(0, len(data))]
    return bytes(rng.randrange(256) for _count in range(rng.choice([1, 16, 300, 4096])))


def mutate_lines(rng, data):
    """A change to a file of lines (the journal): a line dropped, doubled, swapped, one made huge, blank
    lines, a last line without its newline."""
    lines = data.split(b"\n")
    roll = rng.random()
    if roll < 0.2 and lines:
        del lines[rng.randrange(len(lines))]
    elif roll < 0.4 and lines and len(data) < (1 << 20):
        at = rng.randrange(len(lines))
        lines[at:at] = [lines[at]] * rng.choice([1, 2, 100, 5000])
    elif roll < 0.55 and len(lines) > 1:
        first, second = rng.sample(range(len(lines)), 2)
        lines[first], lines[second] = lines[second], lines[first]
    elif roll < 0.65:
        lines.insert(rng.randint(0, len(lines)), rng.choice([b"", b" ", b"\r", b"{}", b"[]", b"null", b"0",
                                                             b"x" * (1 << 20), b"\x00" * 64]))
    elif roll < 0.75:
        return data.rstrip(b"\n")
    else:
        at = rng.randrange(len(lines)) if lines else 0
        if lines:
            lines[at] = mutate_bytes(rng, lines[at])
    return b"\n".join(lines)


# -- YAML ----------------------------------------------------------------------------------

YAML_ATTACKS = [
    # billion laughs: nine levels of ten aliases each
    "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n" + "".join(
        "%s: &%s [%s]\n" % (name, name, ",".join(["*" + prev] * 9))
        for prev, name in zip("abcdefgh", "bcdefghi")),
    "gpus: &x [*x]\n",
    "x: !!python/object/apply:os.system [\"id\"]\n",
    "x: !!python/name:os.system\n",
    "x: !!binary aGVsbG8=\n",
    "x: !!timestamp 2001-12-14t21:59:43.10-05:00\n",
    "x: !!set {a, b}\n",
    "x: !!omap [a: 1, b: 2]\n",
    "? [a, b]\n: 1\n",
    "? {a: 1}\n: 1\n",
    "1: 2\nnull: 3\ntrue: 4\n",
    "x: 1\n---\nx: 2\n",
    "x: \"\\x1b[2J\"\ny: \"\\u2028\\ud800\"\n",
    "x: &a 1\n<<: *a\n",
    "<<: [*a]\n",
    "x: .nan\ny: .inf\nz: -.inf\n",
    "x: 0x7fffffffffffffffff\ny: 0o777777777777777777777\nz: 0b1111\n",
    "x: 1_000_000\ny: 1:20:30\nz: 190:20:30.15\n",
    "x: " + "1" * HUGE_DIGITS + "\n",
    "x: " + "[" * 100000 + "\n",
    "x: " + "{a: " * 5000 + "1" + "}" * 5000 + "\n",
    "x:\n" + "".join(" " * n + "- \n" for n in range(0, 4000, 2)),
    "\tx: 1\n",
    "%YAML 1.1\n%TAG ! tag:yaml.org,2002:\n---\nx: !str 1\n",
    "x: |\n  \x1b[2J\n",
    "x: *undefined\n",
]


def yaml_text(rng, base):
    """YAML-only trouble: a known attack alone or after ``base`` (text), or ``base`` with a YAML feature
    put into a line."""
    roll = rng.random()
    attack = rng.choice(YAML_ATTACKS)
    if roll < 0.4:
        return attack
    if roll < 0.6:
        return base + ("\n" if not base.endswith("\n") else "") + attack
    lines = base.split("\n")
    at = rng.randrange(len(lines)) if lines else 0
    insert = rng.choice(["&anchor ", "*anchor", "!!str ", "!!int ", "!!float ", "!!binary ", "? ", "- ", "<<: ",
                         "&a [*a] ", "!!python/tuple ", "\t", "'", '"', "|", ">", "{", "[", "#", "---", "...", "%"])
    line = lines[at] if lines else ""
    cut = line.find(": ")
    if cut >= 0:
        line = line[:cut + 2] + insert + line[cut + 2:]
    else:
        line = insert + line
    if lines:
        lines[at] = line
    else:
        lines = [line]
    return "\n".join(lines)


# -- the file system ---------------------------------------------------------------------

def _remove(path):
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(info.st_mode):
        for name in os.listdir(path):
            _remove(os.path.join(path, name))
        os.rmdir(path)
    else:
        os.unlink(path)


def _fifo(rng, path, ctx):
    os.mkfifo(path, 0o600)


def _link_dev_zero(rng, path, ctx):
    os.symlink(rng.choice(["/dev/zero", "/dev/urandom", "/dev/random", "/dev/stdin", "/proc/self/fd/0"]), path)


def _link_elsewhere(rng, path, ctx):
    """A link to a file outside (root's own, readable), to itself (a loop), or to nothing."""
    os.symlink(rng.choice(["/etc/passwd", "/etc/shadow", "/etc/hostname", os.path.basename(path), "missing",
                           "../../../../../../../../etc/passwd", ctx.outside]), path)


def _directory(rng, path, ctx):
    os.mkdir(path, 0o700)
    if rng.random() < 0.5:
        with open(os.path.join(path, "x"), "wb") as handle:
            handle.write(b"{}")


def _sparse(rng, path, ctx):
    """A file of a gigabyte (or just past its cap), made in no time: a sparse one."""
    with open(path, "wb") as handle:
        handle.truncate(rng.choice([ctx.cap + 1 if ctx.cap else 1 << 16, 1 << 30, 1 << 40]))


def _at_cap(rng, path, ctx):
    """A file just under its cap: many small JSON values, or one long string of escapes, what the reader
    lets through at its most."""
    cap = ctx.cap or (1 << 20)
    if rng.random() < 0.3:
        escape = rng.choice([b"\\u2028", b"\\n", b"\\\\", b"a"])
        with open(path, "wb") as handle:
            handle.write(b'{"a": "' + escape * max(0, (cap - 10) // len(escape)) + b'"}')
        return
    unit = rng.choice([b"[],", b"0,", b'"",', b"{},", b'{"a":[0,{}]},'])
    count = max(0, (cap - 2) // len(unit))
    with open(path, "wb") as handle:
        handle.write(b"[" + unit * count + b"0]")


def _socket(rng, path, ctx):
    """A unix socket bound there (from its directory: a socket's path holds 107 bytes at most)."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    here = os.getcwd()
    try:
        os.chdir(os.path.dirname(path))
        server.bind(os.path.basename(path))
    finally:
        os.chdir(here)
        server.close()


def _foreign(rng, path, ctx):
    """A file another account owns (when this process may give one away), else one no one may read."""
    with open(path, "wb") as handle:
        handle.write(ctx.valid)
    if os.geteuid() == 0:
        os.chown(path, rng.choice([12345, 65533, 0 if ctx.owner else 1]), rng.choice([12345, 0]))
    os.chmod(path, rng.choice([0, 0o200, 0o4777, 0o666]))


def _hard_link(rng, path, ctx):
    """A hard link to a file root owns outside the directory (the same file system)."""
    os.link(ctx.outside, path)


FS_ATTACKS = {
    "fifo": _fifo,
    "link-device": _link_dev_zero,
    "link-elsewhere": _link_elsewhere,
    "directory": _directory,
    "sparse-huge": _sparse,
    "at-cap": _at_cap,
    "socket": _socket,
    "foreign-owner": _foreign,
    "hard-link": _hard_link,
}


class FsContext(object):
    """What an attack needs: the file's cap, a valid content, a root-owned file outside the directory,
    and the uid that owns the directory (None: this process)."""

    def __init__(self, cap, valid, outside, owner=None):
        self.cap = cap
        self.valid = valid
        self.outside = outside
        self.owner = owner


def fs_attack(rng, name, path, ctx):
    """Put attack ``name`` where ``path`` is (whatever was there removed first)."""
    _remove(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    FS_ATTACKS[name](rng, path, ctx)


def plant_many(directory, count):
    """``count`` empty files in ``directory``: a crowded state directory."""
    for number in range(count):
        fd = os.open(os.path.join(directory, "planted-%06d" % number), os.O_CREAT | os.O_WRONLY, 0o600)
        os.close(fd)
