# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""``bcd-holds deliver``: the node posts its unacknowledged events to the gateway by itself.

The same delivery as the role's ``tasks/deliver.yml``, without Ansible: the journal is read under the
pass lock as the module ``bcd.devices.events`` reads it (``NodeState.list_and_acknowledge``, which
seals events journaled before format 2), posted oldest first as ``{"events": [...]}`` in requests of
at most ``max_events`` events and ``max_bytes`` bytes (``domain.delivery.deliveries``), and each
answer is worked out as the filter ``bcd.devices.delivery`` works it out
(``domain.delivery.delivery``): acknowledged through the highest seq of the contiguous accepted
prefix, nothing on an error answer, and no later request once one was not wholly accepted.

Its configuration is a JSON file root writes (``/etc/bcd-holds/deliver.json``, the role's
``bcd_holds_gateway_*`` variables): ``url`` (http or https), and optionally ``ca_file``,
``timeout``, ``token_file``, ``token_header``, ``max_events``, ``max_bytes``. It must be root's
(or the caller's own) and writable by no one else; nothing of it comes from the environment. The
token is read from ``$CREDENTIALS_DIRECTORY/gateway-token`` when systemd handed it over
(``LoadCredential=``), else from ``token_file``. No proxy from the environment is used and no
redirect is followed (the token would go with it).

A gateway that cannot be reached, or answers 429 or 5xx, is left alone for a while
(``domain.delivery.backoff_seconds``): the state directory's ``delivery-backoff.json`` records the
failures in a row and when to try next, and a run before then only says so; any other answer
clears it.

Exit codes: 0 every event posted was accepted and acknowledged, there was nothing to deliver, or
the run waited out a backoff; 1 the gateway answered but did not take every event (a rejection, an
answer other than 200 or 429 and 5xx, an event larger than ``max_bytes``); 2 the delivery could not
run (its configuration, the token, the state directory); 75 the gateway could not be reached or
answered 429 or 5xx: nothing was lost, the backoff is set and a later run tries again.
"""

from __future__ import annotations

import json
import os
import random
import stat
import time
from typing import IO, TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Tuple

from ansible_collections.bcd.devices.plugins.module_utils.domain.delivery import (
    BACKOFF_MAX,
    BACKOFF_SPREAD,
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_EVENTS,
    answer_problem,
    backoff_record,
    backoff_seconds,
    backs_off,
    deliveries,
    delivery,
)
from ansible_collections.bcd.devices.plugins.module_utils.node.fsutil import (
    NotRegularFile,
    join_root,
    read_regular_stat,
    remove_file,
    write_atomic,
)
from ansible_collections.bcd.devices.plugins.module_utils.state.store import NodeState
from ansible_collections.bcd.devices.plugins.module_utils.support import bounded_json
from ansible_collections.bcd.devices.plugins.module_utils.support.errors import BcdError, type_name
from ansible_collections.bcd.devices.plugins.module_utils.support.json_bytes import json_bytes
from ansible_collections.bcd.devices.plugins.module_utils.support.speed import lazy_pattern
from ansible_collections.bcd.devices.plugins.module_utils.support.text import printable

if TYPE_CHECKING:  # imported where a delivery runs, not by every bcd-holds command
    import http.client
    import urllib.request

EX_OK, EX_FAILED, EX_ERROR, EX_RETRY = 0, 1, 2, 75
DEFAULT_CONFIG = "/etc/bcd-holds/deliver.json"
CREDENTIAL = "gateway-token"  # LoadCredential=gateway-token:<file> in bcd-holds-deliver.service
BACKOFF_FILE = "delivery-backoff.json"
CONFIG_CAP = 64 * 1024
TOKEN_CAP = 4096
BACKOFF_CAP = 4096
ANSWER_CAP = 8 * 1024 * 1024  # the answer to 10 000 events: their seqs, and a reason for each rejected one
MAX_TIMEOUT = 600
MAX_URL = 2048
MAX_EVENTS_LIMIT = 100000
MIN_BYTES, MAX_BYTES_LIMIT = 1024, 64 * 1024 * 1024
SETTINGS = ("url", "ca_file", "timeout", "token_file", "token_header", "max_events", "max_bytes")
_HEADER_NAME = lazy_pattern(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$")
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)


class DeliverError(BcdError):
    """The delivery cannot run: its configuration, the token or the CA file (exit 2)."""


class DeliverConfig:
    """The checked configuration: node paths for ``ca_file`` and ``token_file``."""

    def __init__(self, url: str, ca_file: Optional[str] = None, timeout: float = 30.0,
                 token_file: Optional[str] = None, token_header: str = "Authorization",
                 max_events: int = DEFAULT_MAX_EVENTS, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.url = url
        self.ca_file = ca_file
        self.timeout = timeout
        self.token_file = token_file
        self.token_header = token_header
        self.max_events = max_events
        self.max_bytes = max_bytes


# -- the configuration --------------------------------------------------------------------------

def check_url(url: Any, where: str) -> str:
    """``url`` when it is an http or https URL naming a host, else ``DeliverError`` saying why."""
    from urllib.parse import urlsplit  # only deliver needs it: not imported by every bcd-holds command
    if not isinstance(url, str) or not url:
        raise DeliverError("%s: url must be the gateway's http:// or https:// URL, got %s" % (where, type_name(url)))
    if len(url) > MAX_URL:
        raise DeliverError("%s: url is %d characters long, more than %d" % (where, len(url), MAX_URL))
    if any(not 0x21 <= ord(char) <= 0x7e for char in url):
        raise DeliverError("%s: url %s has a space, a control or a non-ASCII character; write it percent-encoded"
                           % (where, json.dumps(url)))
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https"):
        raise DeliverError("%s: url %s is not http:// or https://" % (where, json.dumps(url)))
    try:
        _port = parts.port  # a port that is no number raises here
    except ValueError:
        raise DeliverError("%s: url %s has a port that is not a number from 0 to 65535" % (where, json.dumps(url)))
    if not parts.hostname:
        raise DeliverError("%s: url %s names no host" % (where, json.dumps(url)))
    if parts.username is not None or parts.password is not None:
        raise DeliverError("%s: url %s carries a user or password; give the gateway's token in token_file instead"
                           % (where, json.dumps(parts._replace(netloc=parts.hostname or "").geturl())))
    return url


def _number(data: Dict[str, Any], name: str, default: Any, low: float, high: float, where: str,
            integer: bool = True) -> Any:
    value = data.get(name, default)
    if value is None:
        return default
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not low <= value <= high:
        raise DeliverError("%s: %s must be %s from %s to %s, got %s" % (
            where, name, "an integer" if integer else "a number of seconds", low, high,
            json.dumps(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else type_name(value)))
    return value


def _node_path(data: Dict[str, Any], name: str, where: str) -> Optional[str]:
    value = data.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not value.startswith("/") or "\0" in value:
        raise DeliverError("%s: %s must be an absolute path on the node, got %s" % (
            where, name, json.dumps(value) if isinstance(value, str) else type_name(value)))
    return value


def parse_config(data: Any, where: str) -> DeliverConfig:
    """The configuration in ``data`` (the JSON of ``where``), each setting checked."""
    if not isinstance(data, dict):
        raise DeliverError("%s must hold a JSON mapping of settings (%s), not %s" % (
            where, ", ".join(SETTINGS), type_name(data)))
    unknown = sorted(str(key) for key in data if key not in SETTINGS)
    if unknown:
        raise DeliverError("%s: unknown setting %s (the settings are %s)" % (
            where, json.dumps(unknown[0]), ", ".join(SETTINGS)))
    if "url" not in data:
        raise DeliverError("%s: url is missing: the gateway's http:// or https:// URL" % where)
    header = data.get("token_header", "Authorization")
    if not isinstance(header, str) or not _HEADER_NAME.match(header):
        raise DeliverError("%s: token_header must be an HTTP header name (letters, digits, -), got %s" % (
            where, json.dumps(header) if isinstance(header, str) else type_name(header)))
    return DeliverConfig(
        url=check_url(data["url"], where),
        ca_file=_node_path(data, "ca_file", where),
        timeout=float(_number(data, "timeout", 30, 1, MAX_TIMEOUT, where, integer=False)),
        token_file=_node_path(data, "token_file", where),
        token_header=header,
        max_events=_number(data, "max_events", DEFAULT_MAX_EVENTS, 1, MAX_EVENTS_LIMIT, where),
        max_bytes=_number(data, "max_bytes", DEFAULT_MAX_BYTES, MIN_BYTES, MAX_BYTES_LIMIT, where))


def read_trusted(path: str, where: str, cap: int, missing: str, unreadable: str = "") -> bytes:
    """The bytes of ``path``, a regular file of at most ``cap`` bytes owned by root or by this process's user and
    writable by no one else (what the delivery's URL, CA and token come from). ``missing`` is said when it is not
    there, ``unreadable`` after the reason when it cannot be opened."""
    def trusted(info: os.stat_result) -> None:
        if info.st_uid not in (0, os.geteuid()):
            raise DeliverError("%s belongs to uid %d, neither root nor this account (uid %d); refused: the delivery "
                               "takes its settings and token only from root's files" % (where, info.st_uid, os.geteuid()))
        if info.st_mode & 0o022:
            raise DeliverError("%s is writable by %s (mode %04o); refused: the delivery takes its settings and token "
                               "only from files no other account can change" % (
                                   where, "others" if info.st_mode & 0o002 else "its group",
                                   stat.S_IMODE(info.st_mode)))
        if info.st_size > cap:
            raise DeliverError("%s is %d bytes, more than the %d it may have; refused" % (where, info.st_size, cap))

    try:
        data, _info = read_regular_stat(path, cap, trusted)
    except (FileNotFoundError, NotADirectoryError):
        raise DeliverError(missing)
    except NotRegularFile:
        raise DeliverError("%s is not a regular file; refused" % where)
    except OSError as exc:
        raise DeliverError("cannot read %s: %s%s" % (where, exc.strerror or exc, unreadable))
    if len(data) > cap:
        raise DeliverError("%s grew past %d bytes while it was read; refused" % (where, cap))
    return data


def load_config(root: str, config: str) -> DeliverConfig:
    """The configuration at the node path ``config`` under ``root``."""
    data = read_trusted(join_root(root, config), config, CONFIG_CAP, (
        "no delivery configuration at %s: the role bcd.devices.bcd_holds writes it when bcd_holds_gateway_url is "
        "set (--config names another file)" % config))
    try:
        parsed = bounded_json.loads(data, config)
    except ValueError as exc:
        raise DeliverError("%s is not JSON: %s" % (config, exc))
    return parse_config(parsed, config)


def read_token(root: str, config: DeliverConfig, environ: Mapping[str, str]) -> Tuple[Optional[str], str]:
    """``(token, where it came from)``: systemd's credential ``gateway-token`` when the unit handed it over,
    else ``token_file``; ``(None, "")`` when neither is set (a gateway that asks for no token)."""
    credentials = environ.get("CREDENTIALS_DIRECTORY") or ""
    where, path = "", ""
    if credentials.startswith("/") and os.path.exists(os.path.join(credentials, CREDENTIAL)):
        path = os.path.join(credentials, CREDENTIAL)
        where = "the credential %s (%s)" % (CREDENTIAL, path)
    elif config.token_file is not None:
        path, where = join_root(root, config.token_file), config.token_file
    if not path:
        return None, ""
    data = read_trusted(path, where, TOKEN_CAP, "the gateway token file %s does not exist" % where, (
        " (it is root's: run bcd-holds deliver as root, or let bcd-holds-deliver.service hand it over as its "
        "credential %s)" % CREDENTIAL))
    try:
        token = data.decode("ascii").strip()
    except UnicodeDecodeError:
        token = "\x00"
    if not token:
        raise DeliverError("the gateway token %s is empty" % where)
    if any(not 0x20 <= ord(char) <= 0x7e for char in token):
        raise DeliverError("the gateway token %s must be one line of printable ASCII" % where)
    return token, where


# -- the backoff --------------------------------------------------------------------------------

class Backoff:
    """``<state_dir>/delivery-backoff.json``: ``{"failures", "next_attempt", "error"}`` while a gateway is down.
    Read and written as the state directory's owner; a file that is not one (a link, a FIFO, garbage) is no
    backoff, said once, and replaced at the next failure."""

    def __init__(self, state: NodeState) -> None:
        self.state = state
        self.path = os.path.join(state.path, BACKOFF_FILE)
        self.where = "%s/%s" % (state.node_path.rstrip("/"), BACKOFF_FILE)
        self.warnings: List[str] = []

    def load(self) -> Optional[Dict[str, Any]]:
        with self.state.as_owner():
            try:
                fd = os.open(self.path, _READ_FLAGS | os.O_NOFOLLOW)
            except (FileNotFoundError, NotADirectoryError):
                return None
            except OSError as exc:
                self.warnings.append("%s cannot be read (%s): no backoff is kept" % (self.where, exc.strerror or exc))
                return None
            try:
                info = os.fstat(fd)
                data = os.read(fd, BACKOFF_CAP + 1) if stat.S_ISREG(info.st_mode) else b""
            finally:
                os.close(fd)
        record = None
        if 0 < len(data) <= BACKOFF_CAP:
            try:
                record = backoff_record(bounded_json.loads(data, self.where))
            except (ValueError, BcdError):
                record = None
        if record is None:
            self.warnings.append("%s is not a backoff record: no backoff is kept, and the file is replaced at the "
                                 "next failure" % self.where)
        return record

    def save(self, record: Dict[str, Any]) -> None:
        data = json_bytes(record)
        try:
            with self.state.as_owner():
                write_atomic(self.path, data, 0o600)
        except (OSError, BcdError) as exc:
            self.warnings.append("cannot record the backoff in %s: %s" % (self.where, exc))

    def clear(self) -> None:
        try:
            with self.state.as_owner():
                if os.path.lexists(self.path):
                    remove_file(self.path)
        except (OSError, BcdError) as exc:
            self.warnings.append("cannot remove %s: %s" % (self.where, exc))


# -- the request --------------------------------------------------------------------------------

def make_opener(root: str, config: DeliverConfig) -> urllib.request.OpenerDirector:
    """A urllib opener that uses no proxy from the environment, follows no redirect, and checks an https
    gateway's certificate against ``ca_file`` (the system's CAs without it)."""
    import urllib.request  # only deliver needs them: not imported by every bcd-holds command

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str,
                             headers: http.client.HTTPMessage, newurl: str) -> Optional[urllib.request.Request]:
            return None  # the 3xx is the answer: the token is never sent on to another address

    handlers: List[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({}), NoRedirect()]
    if config.url.lower().startswith("https:"):
        import ssl
        try:
            context = ssl.create_default_context(
                cafile=join_root(root, config.ca_file) if config.ca_file else None)
        except (OSError, ssl.SSLError, ValueError) as exc:
            raise DeliverError("cannot use the CA file %s: %s" % (config.ca_file, getattr(exc, "strerror", None) or exc))
        handlers.append(urllib.request.HTTPSHandler(context=context))
    return urllib.request.build_opener(*handlers)


def _answer(raw: bytes) -> Any:
    if not raw or len(raw) > ANSWER_CAP:
        return None
    try:
        return bounded_json.loads(raw, "the gateway's answer")
    except (ValueError, BcdError):
        return None


def post(opener: urllib.request.OpenerDirector, config: DeliverConfig, token: Optional[str], body: bytes) -> Dict[str, Any]:
    """The answer to one request, shaped as ``ansible.builtin.uri`` registers it (what the filter reads):
    ``status`` (-1: no answer), ``json`` (the parsed answer or None), ``msg``; and ``retry_after`` (seconds, or None)."""
    import http.client
    import urllib.error
    import urllib.request
    headers = {"Content-Type": "application/json", "Accept": "application/json", "User-Agent": "bcd-holds deliver"}
    if token is not None:
        headers[config.token_header] = ("Bearer " + token) if config.token_header.lower() == "authorization" else token
    request = urllib.request.Request(config.url, data=body, headers=headers, method="POST")
    retry_after = None
    try:
        with opener.open(request, timeout=config.timeout) as response:
            status, raw = response.status, response.read(ANSWER_CAP + 1)
    except urllib.error.HTTPError as exc:
        status = exc.code
        try:
            raw = exc.read(ANSWER_CAP + 1)
        except (OSError, http.client.HTTPException):
            raw = b""
        try:
            retry_after = max(0, min(int(exc.headers.get("Retry-After", "") if exc.headers else ""), int(BACKOFF_MAX)))
        except (TypeError, ValueError):
            retry_after = None
    except urllib.error.URLError as exc:
        return {"status": -1, "json": None, "msg": printable(exc.reason), "retry_after": None}
    except (OSError, http.client.HTTPException, ValueError) as exc:  # a timeout, a connection reset, a bad answer
        return {"status": -1, "json": None, "msg": printable(str(exc) or type(exc).__name__), "retry_after": None}
    answer = _answer(raw)
    msg = "OK" if status == 200 else "HTTP %d" % status
    if status != 200 and isinstance(answer, dict) and isinstance(answer.get("error"), str):
        msg += ": " + printable(answer["error"], 300)
    return {"status": status, "json": answer, "msg": msg, "retry_after": retry_after}


# -- the run ------------------------------------------------------------------------------------

def _plural(count: int, word: str) -> str:
    return "%d %s%s" % (count, word, "" if count == 1 else "s")


def _rejected_text(rejected: Any, not_accepted: int) -> str:
    items = rejected if isinstance(rejected, list) else [rejected]
    shown = []
    for item in items[:3]:
        if isinstance(item, dict) and "seq" in item and "reason" in item:
            shown.append("seq %s (%s)" % (item["seq"], printable(item["reason"], 200)))
        else:
            shown.append(printable(json.dumps(item), 200))
    more = " and %d more" % (len(items) - 3) if len(items) > 3 else ""
    if shown:
        return "the gateway rejected " + ", ".join(shown) + more
    return "the gateway did not accept seq %d" % not_accepted


def run_delivery(root: str, state_dir: str, config_path: str, environ: Mapping[str, str], ignore_backoff: bool = False,
                 lock_timeout: float = 120.0, now: Optional[float] = None,
                 spread: Optional[float] = None) -> Dict[str, Any]:
    """One run of ``bcd-holds deliver``: what it did, the line that says so (``message``) and its exit code
    (``code``). ``DeliverError`` when it cannot run."""
    config = load_config(root, config_path)
    token, token_from = read_token(root, config, environ)
    opener = make_opener(root, config)
    state = NodeState(join_root(root, state_dir), state_dir)
    backoff = Backoff(state)
    now = time.time() if now is None else now
    result: Dict[str, Any] = {
        "url": config.url, "skipped": False, "events": 0, "requests": 0, "posted": [], "accepted": [], "rejected": [],
        "ack_through": None, "acknowledged": 0, "left": [], "error": "", "backoff": None, "token": token_from or None,
        "warnings": backoff.warnings, "code": EX_OK, "message": ""}
    record = backoff.load()
    if record is not None:
        wait = record["next_attempt"] - now
        if wait > BACKOFF_MAX * (1 + BACKOFF_SPREAD) + 60:
            wait = 0  # the clock went back: a wait longer than any backoff is none
        result["backoff"] = dict(record, wait=max(0.0, round(wait, 1)))
        if wait > 0 and not ignore_backoff:
            result["skipped"] = True
            result["message"] = ("not delivering to %s yet: %s in a row, the last: %s; the next try is in %d s "
                                 "(bcd-holds deliver --now tries at once)" % (
                                     config.url, _plural(record["failures"], "failed try"), record["error"] or "?",
                                     int(wait + 0.999)))
            return result
    events, _none = state.list_and_acknowledge(None, lock_timeout=lock_timeout)
    result["warnings"] = backoff.warnings + state.warnings()
    events = sorted((event for event in events if isinstance(event.get("seq"), int)), key=lambda event: event["seq"])
    result["events"] = len(events)
    if not events:
        result["message"] = "nothing to deliver to %s: no unacknowledged event" % config.url
        return result
    bodies, too_large = deliveries(events, config.max_events, config.max_bytes)
    reason, reached = "", False
    last: Optional[Dict[str, Any]] = None
    for chunk, body in bodies:
        last = post(opener, config, token, body)
        result["requests"] += 1
        outcome = delivery(chunk, last, config.url)
        result["posted"] += outcome["posted"]
        result["accepted"] += outcome["accepted"]
        if isinstance(outcome["rejected"], list):
            result["rejected"] += outcome["rejected"]
        elif outcome["rejected"]:
            result["rejected"].append(outcome["rejected"])
        reached = reached or (last["status"] >= 0 and not backs_off(last["status"]))
        if outcome["ack_through"] is not None:
            _left, acknowledged = state.list_and_acknowledge(outcome["ack_through"], lock_timeout=lock_timeout)
            result["ack_through"] = outcome["ack_through"]
            result["acknowledged"] += acknowledged
        if last["status"] < 0:
            reason = "the gateway could not be reached: %s" % last["msg"]
        elif last["status"] != 200:
            reason = "the gateway answered %s" % last["msg"]
        elif answer_problem(last["status"], last["json"]):
            reason = "the gateway " + answer_problem(last["status"], last["json"])
        elif outcome["left"]:
            reason = _rejected_text(outcome["rejected"], outcome["left"][0])
        if reason:
            break
    if not reason and too_large is not None:
        size = len(json.dumps(too_large, ensure_ascii=True, separators=(",", ":")))
        reason = ("event seq %s is %d bytes as JSON, more than max_bytes (%d): it and every event after it stay "
                  "until max_bytes (the role's bcd_holds_gateway_max_bytes, and the gateway's max_body_bytes) is "
                  "raised" % (too_large.get("seq"), size, config.max_bytes))
    through = result["ack_through"]
    result["left"] = [event["seq"] for event in events if through is None or event["seq"] > through]
    result["error"] = reason
    retry = last is not None and backs_off(last["status"])
    if retry:
        failures = (0 if reached or record is None else record["failures"]) + 1
        wait = backoff_seconds(failures, random.random() if spread is None else spread)
        if last is not None and last.get("retry_after"):
            wait = max(wait, float(last["retry_after"]))
        saved = {"failures": failures, "next_attempt": round(now + wait, 3), "error": printable(reason, 500)}
        backoff.save(saved)
        result["backoff"] = dict(saved, wait=round(wait, 1))
    elif reached and record is not None:
        backoff.clear()
        result["backoff"] = None
    result["warnings"] = backoff.warnings + state.warnings()
    result["code"] = EX_RETRY if retry else EX_FAILED if reason else EX_OK
    posted = len(result["posted"])
    acked = ("acknowledged %d through seq %s" % (result["acknowledged"], through) if through is not None
             else "nothing acknowledged")
    shown_posted = ("%d of %s" % (posted, _plural(len(events), "event")) if posted != len(events)
                    else _plural(posted, "event"))
    next_try = ""
    if retry:
        next_try = "; the next try is in %d s (%s in a row)" % (
            int(result["backoff"]["wait"] + 0.999), _plural(result["backoff"]["failures"], "failure"))
    result["message"] = "%s to %s: posted %s in %s, %d accepted, %s, %d left%s%s" % (
        "delivered" if result["code"] == EX_OK else "delivery", config.url, shown_posted,
        _plural(result["requests"], "request"), len(result["accepted"]), acked, len(result["left"]),
        (": " + reason) if reason else "", next_try)
    return result
