# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read a node directory in one command (each testinfra call is a whole Ansible module run).

``snapshot(host, root)`` returns ``{node path: {"user", "group", "mode", "type", "sha256", "text"}}``
for everything under ``root``, read on the host by its own Python.
"""

import json

SCRIPT = r"""
import grp, hashlib, json, os, pwd, stat, sys
root = sys.argv[1]
found = {}
for dirpath, dirnames, filenames in os.walk(root):
    for name in dirnames + filenames:
        path = os.path.join(dirpath, name)
        info = os.lstat(path)
        item = {"user": pwd.getpwuid(info.st_uid).pw_name, "group": grp.getgrgid(info.st_gid).gr_name,
                "mode": stat.S_IMODE(info.st_mode),
                "type": "dir" if stat.S_ISDIR(info.st_mode) else "file" if stat.S_ISREG(info.st_mode)
                        else "socket" if stat.S_ISSOCK(info.st_mode) else "other"}
        if item["type"] == "file":
            with open(path, "rb") as handle:
                data = handle.read()
            item["sha256"] = hashlib.sha256(data).hexdigest()
            if len(data) < 65536:
                item["text"] = data.decode("utf-8", "replace")
        found["/" + os.path.relpath(path, root)] = item
print(json.dumps(found))
"""


def snapshot(host, root):
    result = host.run("/usr/bin/python3 -c %s %s" % (quote(SCRIPT), quote(root)))
    assert result.rc == 0, result.stderr
    return json.loads(result.stdout)


def quote(text):
    return "'" + text.replace("'", "'\"'\"'") + "'"
