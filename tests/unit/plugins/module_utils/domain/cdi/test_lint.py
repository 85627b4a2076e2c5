# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""``cdi-lint`` on spec directories as a runtime loads them (``domain/cdi/lint.py``, ``node/cdi_files.py``).

Real specs: NVIDIA's from tests/data/nvidia-cdi and holds a pass converged; hostile ones by hand.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi import lint as cdi_lint, vendor as cdi_vendor
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.hold_spec import damaged_spec_path
from ansible_collections.bcd.devices.plugins.module_utils.domain.cdi.lint import (
    ERROR,
    MAX_FILE_BYTES,
    MAX_FILES,
    MAX_MESSAGE,
    WARN,
    Finding,
    SpecFile,
    directory_priority,
    lint,
)
from ansible_collections.bcd.devices.plugins.module_utils.node import fsutil
from ansible_collections.bcd.devices.plugins.module_utils.node.cdi_files import read_spec_dirs
from ansible_collections.bcd.devices.tests.unit.builders import hold
from ansible_collections.bcd.devices.tests.unit.conftest import GPU_A, GPU_B, NVIDIA_CDI, vendor_text


def spec(device="GPU-1", kind="bcd.dev/gpu", allocation="a1", **extra):
    data = {"cdiVersion": "0.6.0", "kind": kind, "annotations": {"bcd.dev/allocation-id": allocation},
            "devices": [{"name": device, "containerEdits": {"env": ["A=1"]}}]}
    data.update(extra)
    return json.dumps(data).encode()


def summaries(findings):
    return [(f.level, f.summary()) for f in findings]


# --- clean directories ------------------------------------------------------------------------------


def test_real_nvidia_specs_of_every_form_lint_clean():
    for path in sorted(NVIDIA_CDI.iterdir()):
        assert summaries(lint([SpecFile("/var/run/cdi", path.name, path.read_bytes())])) == [], path.name


def test_a_converged_node_lints_clean(node):
    node.run(1, [hold("a1", GPU_A), hold("a2", GPU_B)])
    files = read_spec_dirs(node.root)
    assert [(f.directory, f.name) for f in files] == [
        ("/etc/cdi", "bcd-a1.json"), ("/etc/cdi", "bcd-a2.json"), ("/var/run/cdi", "nvidia.yaml")]
    assert all(f.content for f in files)
    assert summaries(lint(files)) == []


def test_no_directories_no_findings(tmp_path):
    assert read_spec_dirs(str(tmp_path)) == []
    assert lint([]) == []


def test_priorities_of_the_directories():
    assert [directory_priority(d) for d in ("/etc/cdi", "/var/run/cdi", "/run/cdi", "/run/cdi/", "/x")] == [
        0, 1, 1, 1, 0]


# --- check 1: every spec loadable ----------------------------------------------------------------


@pytest.mark.parametrize("content, why", [
    (b"[1, 2]", "holds no CDI spec (no mapping at the top)"),
    (b"null", "holds no CDI spec"),
    (b"", "holds no CDI spec"),
    (b'"just a string"', "holds no CDI spec"),
    (b"\xff\xfe\x00", "is not UTF-8 text"),
    (b"[" * 100000, "nested too deeply"),
    (b"{" * 100000, "not valid"),
    (json.dumps({"cdiVersion": "9.9.9", "kind": "bcd.dev/gpu", "devices": []}).encode(), "is not valid CDI"),
    (json.dumps({"cdiVersion": 6, "kind": ["x"], "devices": {"a": 1}}).encode(), "is not valid CDI"),
    (json.dumps({"cdiVersion": "0.6.0", "kind": "bcd.dev/gpu", "devices": [1, None, "x", []]}).encode(),
     "is not valid CDI"),
    (spec()[:-1] + b', "unknownField": 1}', "is not valid CDI"),
    (spec()[:-1] + b', "kind": "bcd.dev/gpu"}', "has the key 'kind' twice"),
    (spec().replace(b'"A=1"', b'"A=1", NaN'), "holds NaN, which is not JSON"),
    (spec(cdiVersion="0.3.0"), "minimum this content requires"),
    (b'{"cdiVersion": "0.6.0", "kind": "bcd.dev/gpu", "devices": [{"name": "x", "containerEdits": {}}]}',
     "is not valid CDI"),
])
def test_a_file_no_runtime_would_load_is_an_error_never_an_exception(content, why):
    findings = lint([SpecFile("/etc/cdi", "x.json", content)])
    assert [f.level for f in findings] == [ERROR] and why in findings[0].message, summaries(findings)
    assert findings[0].path == "/etc/cdi/x.json"
    assert len(findings[0].message) <= MAX_MESSAGE and "\n" not in findings[0].summary()


def test_the_first_problems_are_named_and_the_rest_counted():
    devices = [{"name": "bad/%d" % i, "containerEdits": {"env": ["A=1"]}} for i in range(50)]
    content = json.dumps({"cdiVersion": "0.6.0", "kind": "bcd.dev/gpu", "devices": devices}).encode()
    (finding,) = lint([SpecFile("/etc/cdi", "many.json", content)])
    assert finding.level == ERROR and finding.message.startswith(
        "is not valid CDI, so runtimes refuse the whole file: devices[0].name: 'bad/0' is not a CDI device name")
    assert len(finding.message) <= MAX_MESSAGE


@pytest.mark.parametrize("text, why", [
    ("cdiVersion: 0.6.0\nkind: example.com/x\ndevices: []\n", "a spec needs at least one device"),
    ("kind: [unclosed\n", "not valid YAML"),
    ("a: &a [*a]\n", "nested more than"),  # a cycle
    ("!!python/object:os.system {}\n", "not valid YAML"),  # SafeLoader refuses it
    ("- 1\n- 2\n", "holds no CDI spec"),
])
def test_a_broken_yaml_file_is_an_error(text, why):
    findings = lint([SpecFile("/etc/cdi", "broken.yaml", text.encode())])
    assert [f.level for f in findings] == [ERROR] and why in findings[0].message, summaries(findings)


def test_yaml_aliases_that_expand_past_the_bound_are_an_error_and_quick():
    # every device shares one env list of 2000 items, 2000 times: 4 million values from a 60 kB file
    env = ", ".join('"E%d=1"' % i for i in range(2000))
    text = ("cdiVersion: 0.6.0\nkind: bcd.dev/gpu\nx-env: &e [%s]\ndevices:\n" % env
            + "".join("- {name: d%d, containerEdits: {env: *e}}\n" % i for i in range(2000)))
    start = time.monotonic()
    (finding,) = lint([SpecFile("/etc/cdi", "bomb.yaml", text.encode())])
    assert finding.level == ERROR and "holds more than 1000000 values" in finding.message
    assert time.monotonic() - start < 20


def test_yaml_without_pyyaml_is_a_warning_not_an_exception(monkeypatch):
    monkeypatch.setattr(cdi_vendor, "HAS_YAML", False)
    files = [SpecFile("/var/run/cdi", "nvidia.yaml", (NVIDIA_CDI / "salilkadam_nvidia.yaml").read_bytes()),
             SpecFile("/etc/cdi", "bcd-a1.json", spec()),  # JSON still checked
             SpecFile("/etc/cdi", "broken.json", b"{nope")]
    assert [(f.level, f.path) for f in lint(files)] == [
        (ERROR, "/etc/cdi/broken.json"), (WARN, "/var/run/cdi/nvidia.yaml")]
    message = lint(files)[1].message
    assert "YAML cannot be checked without PyYAML" in message and "not checked" in message
    # a .yaml file that is JSON is read without PyYAML
    assert lint([SpecFile("/etc/cdi", "bcd.yaml", spec(kind="example.com/xy"))]) == []


def test_a_broken_pyyaml_is_a_warning(monkeypatch):
    def broken(text, name):
        raise ImportError("No module named 'yaml._yaml'")
    monkeypatch.setattr(cdi_vendor, "parse_spec_text", broken)
    (finding,) = lint([SpecFile("/etc/cdi", "x.yaml", b"kind: x\n")])
    assert finding.level == WARN and "PyYAML does not import" in finding.message


def test_only_json_and_yaml_count_dotfiles_included():
    broken = b"{"
    files = [SpecFile("/etc/cdi", name, broken) for name in (
        ".hidden.json", "x.yml", "x.JSON", "x.json.bak", "README", ".yaml")]
    assert [f.path for f in lint(files)] == ["/etc/cdi/.hidden.json", "/etc/cdi/.yaml"]


# --- check 2: each device defined once ---------------------------------------------------------------


def test_a_device_in_two_files_of_one_directory_is_dropped_from_both():
    files = [SpecFile("/etc/cdi", "bcd-a1.json", spec("GPU-1")),
             SpecFile("/etc/cdi", "bcd-a2.json", spec("GPU-1", allocation="a2")),
             SpecFile("/etc/cdi", "bcd-a3.json", spec("GPU-3", allocation="a3"))]
    assert summaries(lint(files)) == [
        (ERROR, "/etc/cdi/bcd-a1.json: bcd.dev/gpu=GPU-1 is also defined by /etc/cdi/bcd-a2.json at the same "
                "priority: the CDI library drops it from both")]


def test_a_device_in_both_directories_is_a_warning_naming_the_winner():
    files = [SpecFile("/etc/cdi", "bcd-a1.json", spec("GPU-1")),
             SpecFile("/var/run/cdi", "elsewhere.json", spec("GPU-1"))]
    assert summaries(lint(files)) == [
        (WARN, "/var/run/cdi/elsewhere.json: claims kind bcd.dev/gpu but is no hold of bcd's; the converger neither "
               "owns nor removes it"),
        (WARN, "/etc/cdi/bcd-a1.json: bcd.dev/gpu=GPU-1 is also defined by /var/run/cdi/elsewhere.json, which wins "
               "(/var/run/cdi has priority)")]


def test_a_conflict_at_one_priority_drops_the_device_from_the_other_directory_too():
    # the CDI library deletes a conflicting name after the scan: the /var/run/cdi copy does not win
    files = [SpecFile("/etc/cdi", "bcd-a1.json", spec("GPU-1")),
             SpecFile("/var/run/cdi", "one.json", spec("GPU-1")),
             SpecFile("/var/run/cdi", "two.json", spec("GPU-1"))]
    findings = [f for f in lint(files) if "GPU-1" in f.message]
    assert summaries(findings) == [
        (ERROR, "/var/run/cdi/one.json: bcd.dev/gpu=GPU-1 is also defined by /var/run/cdi/two.json at the same "
                "priority: the CDI library drops it from both (and from /etc/cdi/bcd-a1.json too: a conflict drops "
                "the name everywhere)")]


def test_devices_of_other_kinds_and_of_unloadable_files_do_not_count():
    nvidia = (NVIDIA_CDI / "ramalama_fullgpu_cdi.json").read_bytes()
    files = [SpecFile("/etc/cdi", "nvidia.json", nvidia), SpecFile("/etc/cdi", "nvidia2.json", nvidia),
             SpecFile("/etc/cdi", "bcd-a1.json", spec("GPU-1")),
             SpecFile("/etc/cdi", "bcd-a2.json", spec("GPU-1", cdiVersion="0.3.0"))]  # refused whole
    assert [(f.level, f.path) for f in lint(files)] == [(ERROR, "/etc/cdi/bcd-a2.json")]
    assert lint(files, kind="nvidia.com/gpu")[1].message.startswith(
        "nvidia.com/gpu=0 is also defined by /etc/cdi/nvidia2.json at the same priority")


# --- check 3: foreign files ------------------------------------------------------------------------


def test_foreign_files_claiming_our_kind_and_bcd_names_of_another_kind_are_named():
    other = spec(kind="example.com/other")
    files = [SpecFile("/etc/cdi", "bcd-a2.json", other),
             SpecFile("/etc/cdi", "bcd-not-an-id.json", other),
             SpecFile("/etc/cdi", "bcd-a3.yaml", spec("GPU-3")),
             SpecFile("/var/run/cdi", "bcd-a4.json", spec("GPU-4")),
             SpecFile("/etc/cdi", "other-tool.json", spec("GPU-5")),
             SpecFile("/etc/cdi", "vendor.json", other)]
    assert summaries(lint(files)) == [
        (WARN, "/etc/cdi/bcd-a2.json: is named as a bcd hold but its kind is 'example.com/other'; the converger "
               "reads it as a hold it cannot read back: rename it"),
        (WARN, "/etc/cdi/bcd-not-an-id.json: is named as a bcd hold but its kind is 'example.com/other'; the "
               "converger neither owns nor removes it"),
        (WARN, "/etc/cdi/bcd-a3.yaml: claims kind bcd.dev/gpu but is no hold of bcd's; the converger neither owns "
               "nor removes it"),
        (WARN, "/var/run/cdi/bcd-a4.json: claims kind bcd.dev/gpu but is no hold of bcd's (bcd writes holds only "
               "to /etc/cdi); the converger neither owns nor removes it"),
        (WARN, "/etc/cdi/other-tool.json: claims kind bcd.dev/gpu but is no hold of bcd's; the converger neither "
               "owns nor removes it")]


# --- check 4: leftovers ----------------------------------------------------------------------------


def test_the_lint_knows_the_temporary_names_atomic_writes_use(tmp_path):
    cdi = tmp_path / "etc" / "cdi"
    cdi.mkdir(parents=True)
    temporary = os.path.basename(fsutil._temp_name(str(cdi / "bcd-a1.json")))  # pylint: disable=protected-access
    (cdi / temporary).write_bytes(b"{\"cdiVer")  # a crashed write
    (cdi / "bcd-a1.json.tmp-0123456789ab").write_bytes(b"")  # not the pattern (no leading dot)
    findings = lint(read_spec_dirs(str(tmp_path)))
    assert summaries(findings) == [
        (WARN, "/etc/cdi/%s: a temporary file a crashed write left; no runtime loads it, delete it while no pass "
               "runs" % temporary)]


def test_damaged_specs_set_aside_are_named_as_kept_for_inspection():
    names = [os.path.basename(damaged_spec_path("a3", 1796292900)), "bcd-a3.json.damaged-20261203T101500Z-2"]
    findings = lint([SpecFile("/etc/cdi", name, b"{") for name in names])
    assert [(f.level, f.path) for f in findings] == [(WARN, "/etc/cdi/" + name) for name in names]
    assert all("kept for inspection" in f.message and "no runtime loads it" in f.message for f in findings)


# --- bounds and hostile input ------------------------------------------------------------------------


def test_more_files_than_the_bound_is_a_finding():
    many = [SpecFile("/etc/cdi", "f%05d.txt" % i, None) for i in range(MAX_FILES + 1)]
    assert summaries(lint(many)) == [
        (WARN, "/etc/cdi: more than %d files in the spec directories; only the first %d are checked"
               % (MAX_FILES, MAX_FILES))]


def test_an_oversized_file_is_a_finding_and_so_is_one_past_the_total():
    big = b" " * (MAX_FILE_BYTES + 1)
    (finding,) = lint([SpecFile("/etc/cdi", "big.json", big)])
    assert finding.level == WARN and "over %d bytes; not checked" % MAX_FILE_BYTES in finding.message
    nearly = b"{}" + b" " * (MAX_FILE_BYTES - 2)
    files = [SpecFile("/etc/cdi", "f%d.json" % i, nearly) for i in range(5)]
    findings = lint(files)
    assert [(f.level, f.path) for f in findings] == [(ERROR, "/etc/cdi/f%d.json" % i) for i in range(4)] + [
        (WARN, "/etc/cdi/f4.json")]
    assert "the most checked" in findings[-1].message


def test_hostile_names_and_messages_stay_on_one_bounded_line():
    name = "x\n\x1b[31m\udcff" + "y" * 400 + ".json"
    (finding,) = lint([SpecFile("/etc/cdi", name, b"[]")])
    line = finding.summary()
    assert "\n" not in line and "\x1b" not in line and "\\n\\x1b[31m\\udcff" in line
    assert len(finding.path) <= MAX_MESSAGE and len(finding.message) <= MAX_MESSAGE
    assert Finding(WARN, "/p", "a\nb").summary() == "/p: a\\nb"


def test_an_unreadable_file_is_a_warning_with_why():
    (finding,) = lint([SpecFile("/etc/cdi", "x.json", None, "cannot be read (Permission denied); not checked")])
    assert finding.summary() == "/etc/cdi/x.json: cannot be read (Permission denied); not checked"
    assert finding.level == WARN
    (finding,) = lint([SpecFile("/etc/cdi", "y.json", None)])
    assert finding.message == "could not be read; not checked"


# --- reading the directories (node/cdi_files.py) ----------------------------------------------------------


def test_the_files_read_are_regular_files_and_links_are_not_followed(tmp_path):
    cdi = tmp_path / "etc" / "cdi"
    cdi.mkdir(parents=True)
    (cdi / "bcd-a1.json").write_bytes(spec("GPU-1"))
    (cdi / "notes.txt").write_bytes(b"not read")
    os.symlink("/etc/passwd", str(cdi / "evil.json"))
    os.symlink("/nonexistent", str(cdi / "dangling.yaml"))
    (cdi / "sub").mkdir()
    (cdi / "sub" / "inside.json").write_bytes(b"{")  # runtimes skip subdirectories
    os.mkfifo(str(cdi / "fifo.json"))
    files = read_spec_dirs(str(tmp_path))
    assert [(f.directory, f.name, f.content) for f in files] == [
        ("/etc/cdi", "bcd-a1.json", spec("GPU-1")), ("/etc/cdi", "dangling.yaml", None),
        ("/etc/cdi", "evil.json", None), ("/etc/cdi", "fifo.json", None), ("/etc/cdi", "notes.txt", None)]
    assert summaries(lint(files)) == [
        (WARN, "/etc/cdi/dangling.yaml: is a symbolic link (to /nonexistent); runtimes follow it, the lint does not"),
        (WARN, "/etc/cdi/evil.json: is a symbolic link (to /etc/passwd); runtimes follow it, the lint does not"),
        (WARN, "/etc/cdi/fifo.json: is not a regular file; runtimes that read it may block or fail; not checked")]


def test_a_linked_spec_directory_is_not_scanned_as_the_cdi_library_does_not(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "bcd-a1.json").write_bytes(spec())
    (tmp_path / "etc").mkdir()
    os.symlink(str(elsewhere), str(tmp_path / "etc" / "cdi"))
    (tmp_path / "var" / "run" / "cdi").mkdir(parents=True)
    (tmp_path / "var" / "run" / "cdi" / "nvidia.yaml").write_text(vendor_text("mig"))
    files = read_spec_dirs(str(tmp_path))
    assert [(f.directory, f.name) for f in files] == [("/etc/cdi", ""), ("/var/run/cdi", "nvidia.yaml")]
    (finding,) = lint(files)
    assert finding.level == ERROR and finding.summary() == (
        "/etc/cdi: is a symbolic link (to %s); the CDI library does not scan it, so runtimes load none of its specs"
        % elsewhere)


def test_an_unreadable_file_is_listed_with_why(tmp_path, monkeypatch):
    cdi = tmp_path / "etc" / "cdi"
    cdi.mkdir(parents=True)
    (cdi / "x.json").write_bytes(spec())
    real_open = os.open

    def refusing(path, *args, **kwargs):
        if str(path).endswith("x.json"):
            raise PermissionError(13, "Permission denied")
        return real_open(path, *args, **kwargs)
    monkeypatch.setattr(os, "open", refusing)
    (entry,) = read_spec_dirs(str(tmp_path))
    assert entry.content is None and entry.problem == "cannot be read (Permission denied); not checked"


def test_the_reader_is_bounded(tmp_path, monkeypatch):
    cdi = tmp_path / "etc" / "cdi"
    cdi.mkdir(parents=True)
    (cdi / "big.json").write_bytes(b" " * (MAX_FILE_BYTES + 10))
    (cdi / "small.json").write_bytes(spec())
    (entry, small) = read_spec_dirs(str(tmp_path))
    assert entry.content is None and entry.problem.startswith("is %d bytes, over the" % (MAX_FILE_BYTES + 10))
    assert small.content == spec()
    monkeypatch.setattr(cdi_lint, "MAX_FILES", 3)
    monkeypatch.setattr("ansible_collections.bcd.devices.plugins.module_utils.node.cdi_files.MAX_FILES", 3)
    for i in range(10):
        (cdi / ("f%d.txt" % i)).write_bytes(b"")
    assert len(read_spec_dirs(str(tmp_path))) == 4  # one past the bound, so the lint says there were more
    monkeypatch.setattr("ansible_collections.bcd.devices.plugins.module_utils.node.cdi_files.MAX_TOTAL_BYTES",
                        len(spec()) + 1)
    for i in range(10):
        os.unlink(str(cdi / ("f%d.txt" % i)))
    (cdi / "zz.json").write_bytes(spec())
    entries = read_spec_dirs(str(tmp_path))
    assert [(e.name, e.content is not None) for e in entries] == [
        ("big.json", False), ("small.json", True), ("zz.json", False)]
    assert "the most checked" in entries[2].problem


def test_a_root_escape_reads_nothing(tmp_path):
    assert read_spec_dirs(str(tmp_path), directories=("/../../etc",)) == []
