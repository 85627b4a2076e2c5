# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The env policy (docs/security.md, "The env policy"): keys that change what programs load or run
are refused by name, values are one line without control characters, and the module and the root
helper apply the one check (``domain/input/assignment.py`` and ``domain/input/env_policy.py``)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.bcd.devices.plugins.module_utils.domain.input import assignment, env_policy
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.env_policy import POLICY, check_env_key
from ansible_collections.bcd.devices.plugins.module_utils.domain.input.section import parse_assignments
from ansible_collections.bcd.devices.plugins.module_utils.entry.helper import handle as helper_entry
from ansible_collections.bcd.devices.tests.unit.builders import hold, request
from ansible_collections.bcd.devices.tests.unit.conftest import GPU_A, GPU_B
from ansible_collections.bcd.devices.tests.unit.plugins.module_utils.entry.helper.conftest import (  # noqa: F401 (fixtures)  pylint: disable=unused-import
    base,
    helper,
)
from ansible_collections.bcd.devices.tests.unit.plugins.modules.test_holds import run

DOC = '(docs/security.md, "The env policy")'
# What the issue names at least, and what docs/security.md adds, each as a key the policy must refuse.
REFUSED = ["PATH", "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "BASH_ENV", "ENV", "IFS", "CDPATH",
           "PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME", "PERL5LIB", "PERL5OPT", "RUBYOPT", "RUBYLIB",
           "NODE_OPTIONS", "NODE_PATH", "GCONV_PATH", "LOCPATH", "NLSPATH", "NVIDIA_DRIVER_CAPABILITIES",
           "NVIDIA_REQUIRE_CUDA", "CUDA_INJECTION64_PATH", "CUDA_VISIBLE_DEVICES", "BCD_ANYTHING",
           "SHELLOPTS", "BASHOPTS", "PS4", "PROMPT_COMMAND", "GLIBC_TUNABLES", "MALLOC_CHECK_", "MALLOC_TRACE",
           "HOSTALIASES", "RESOLV_HOST_CONF", "LOCALDOMAIN", "RES_OPTIONS", "JAVA_TOOL_OPTIONS",
           "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "CLASSPATH", "LUA_INIT", "LUA_PATH", "TCLLIBPATH", "PERLLIB",
           "SYSTEMD_PAGER", "LISTEN_FDS", "LISTEN_PID", "NOTIFY_SOCKET", "CREDENTIALS_DIRECTORY", "TMPDIR",
           "HOME", "OPENSSL_CONF", "NCCL_NET_PLUGIN", "ZDOTDIR", "BASH_XTRACEFD", "VK_ICD_FILENAMES",
           "VK_LAYER_PATH", "__EGL_VENDOR_LIBRARY_FILENAMES", "__GLX_VENDOR_LIBRARY_NAME", "OCL_ICD_VENDORS",
           "LIBGL_DRIVERS_PATH", "OMPI_MCA_mca_base_component_path", "UCX_MODULE_DIR", "FI_PROVIDER_PATH",
           "GTK_MODULES", "QT_PLUGIN_PATH", "R_PROFILE_USER", "PHPRC", "PAGER", "LESSOPEN", "GIT_SSH_COMMAND",
           "GIT_CONFIG_COUNT", "GIT_CONFIG_KEY_0", "GIT_CONFIG_VALUE_0", "SSLKEYLOGFILE",
           # issue 33: members of families the policy listed by name, written on 0.x; and issue 34's SLURM_*
           "GIT_CONFIG_PARAMETERS", "GIT_EXTERNAL_DIFF", "GIT_PROXY_COMMAND", "GIT_SEQUENCE_EDITOR", "SSH_ASKPASS",
           "SUDO_ASKPASS", "FCEDIT", "OMPI_MCA_plm_rsh_agent", "PRTE_MCA_plm_ssh_agent",
           "PMIX_MCA_mca_base_component_path", "HWLOC_PLUGINS_PATH", "DBUS_SYSTEM_BUS_ADDRESS", "SLURM_JOB_ID",
           "SLURM_PROCID", "SBATCH_EXPORT", "SUDO_EDITOR", "SSH_ASKPASS_REQUIRE", "DYLD_LIBRARY_PATH",
           "HYDRA_LAUNCHER_EXEC", "DBUS_SESSION_BUS_ADDRESS", "XDG_RUNTIME_DIR", "BROWSER", "EDITOR", "PAGER"]
ALLOWED = ["TEAM", "OMP_NUM_THREADS", "NCCL_DEBUG", "HTTPS_PROXY", "LANG", "LC_ALL", "TZ", "ld_preload",
           "path", "_", "A" * 128, "WANDB_PROJECT", "HF_HOME"]
RESERVED = ["BCD_ALLOCATION_ID", "BCD_RESERVATION_ID", "BCD_CGROUP_PARENT", "NVIDIA_VISIBLE_DEVICES",
            "CUDA_MPS_PIPE_DIRECTORY"]


def entry(**fields):
    data = {"allocation_id": "alloc_1", "reservation_id": "rsv_1", "binding": "BINDING_HOLD",
            "devices": [{"id": GPU_A, "device_class": "gpu"}]}
    data.update(fields)
    return data


def refusal(env):
    parsed = parse_assignments([entry(env=env)])
    assert parsed.assignments == [] and len(parsed.refusals) == 1
    assert parsed.refusals[0].reason == "invalid-assignment"
    return parsed.refusals[0].message


# -- keys ------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", REFUSED)
def test_a_key_that_steers_what_runs_is_refused_naming_it(key):
    message = refusal(["GOOD=1", "%s=/tmp/evil" % key])
    assert message.startswith("env[1]: %s " % key)
    if not key.startswith("BCD_"):
        assert message.endswith("; a hold's env may not set it %s" % DOC)


def test_the_issues_example_reads_as_given():
    assert refusal(["LD_PRELOAD="]) == ("env[0]: LD_PRELOAD changes what programs load or run; a hold's env "
                                        "may not set it %s" % DOC)


@pytest.mark.parametrize("key", RESERVED)
def test_bcds_own_keys_keep_their_message(key):
    assert refusal(["%s=x" % key]) == "env[0]: %s is set by bcd and cannot be overridden" % key


@pytest.mark.parametrize("key", ALLOWED)
def test_a_key_outside_the_policy_is_kept(key):
    parsed = parse_assignments([entry(env=["%s=v 1" % key])])
    assert parsed.refusals == []
    assert parsed.assignments[0].env == ("%s=v 1" % key,)


def test_every_rule_refuses_what_it_names_and_says_why():
    for rule in POLICY:
        if rule.prefix == env_policy.PATTERN:
            continue  # the property tests below generate their keys
        key = rule.key + ("X" if rule.prefix else "")
        assert check_env_key(key) is not None, key
        assert rule.why and rule.says and env_policy.rule_for(key) is not None


# -- families (issue 33): keys generated from each family, every one refused -------------------------

NAME = st.from_regex(r"\A[A-Za-z0-9_]{0,20}\Z", fullmatch=True)
WORD = st.from_regex(r"\A[A-Z][A-Z0-9]{0,8}\Z", fullmatch=True)
FAMILIES = {
    # every key git reads: commands it runs, configuration it takes
    "git": st.builds("GIT_{}".format, NAME),
    # a password prompt a program runs, by any program's name, with or without a suffix
    "askpass": st.builds("{}ASKPASS{}".format, NAME, NAME),
    # an editor, pager or browser a program runs, and any *_COMMAND
    "editors": st.builds("{}{}".format, NAME, st.sampled_from(["EDITOR", "PAGER", "BROWSER", "_COMMAND"])),
    "fcedit": st.just("FCEDIT"),
    # any MCA parameter of any MPI project (plm_rsh_agent, mca_base_component_path, ...)
    "mca": st.builds("{}_MCA_{}".format, st.sampled_from(["OMPI", "PRTE", "PMIX", "OPAL", "ORTE"]) | WORD, NAME),
    "hydra": st.builds("{}{}".format, st.sampled_from(["HYDRA_", "I_MPI_HYDRA_"]), NAME),
    "hwloc": st.builds("HWLOC_{}".format, NAME),
    # a library's plugin, module, component or provider directory, a library path, a preload
    "plugin_paths": st.builds("{}{}_{}".format, NAME,
                              st.sampled_from(["PLUGIN", "PLUGINS", "MODULE", "MODULES", "COMPONENT", "COMPONENTS",
                                               "PROVIDER", "PROVIDERS"]),
                              st.sampled_from(["PATH", "PATHS", "DIR", "DIRS", "FILE", "FILES", "DIRECTORY"])),
    "library_paths": st.builds("{}{}".format, NAME, st.sampled_from(["LIBRARY_PATH", "_PRELOAD"])),
    "dbus": st.builds("DBUS_{}".format, NAME),
    "slurm": st.builds("{}{}".format, st.sampled_from(["SLURM_", "SBATCH_", "SALLOC_", "SRUN_"]), NAME),
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_key_of_a_family_is_refused(family):
    @settings(max_examples=150, deadline=None, derandomize=True)
    @given(FAMILIES[family])
    def refused(key):
        key = key[:128]
        if not env_policy.ENV_KEY_RE.fullmatch(key):
            return
        why = check_env_key(key)
        assert why is not None and why.startswith(key + " "), key
        message = refusal(["GOOD=1", "%s=x" % key])
        assert message.startswith("env[1]: %s " % key)

    refused()  # pylint: disable=no-value-for-parameter


def test_the_families_leave_the_workloads_own_keys_alone():
    for key in ALLOWED + ["GITHUB_TOKEN_NAME", "SLURMISH", "MODULE_NAME", "PLUGIN", "DBUS", "HWLOC",
                          "NCCL_SOCKET_IFNAME", "PROMPT", "EDITORIAL_TEAM"]:
        assert check_env_key(key) is None, key


@pytest.mark.parametrize("key, shown", [
    ("A" * 129, "'" + "A" * 77 + "...'"),
    ("1A", "'1A=x'"),
    ("A-B", "'A-B=x'"),
    ("BASH_FUNC_f%%", "'BASH_FUNC_f%%=x'"),
    ("\x1b[2J\x1b[H", "'\\x1b[2J\\x1b[H=x'"),
    ("A\u2028B", "'A\\u2028B=x'"),
    ("{{A}}", "'\\x7b\\x7bA\\x7d\\x7d=x'"),
    ("A'B\\", "'A\\x27B\\x5c=x'"),
])
def test_a_key_outside_the_pattern_is_refused_shown_escaped_and_cut(key, shown):
    message = refusal(["%s=x" % key])
    # the pattern said in words: the refusal is journaled, and no event may hold a curly bracket
    assert message == ("env[0]: %s is not KEY=VALUE with KEY a letter or underscore, then up to 127 letters, digits "
                       "and underscores" % shown)
    assert message.isascii() and message.isprintable() and len(message) < 200 and not set(message) & set("{}")


def test_a_mapping_is_checked_key_by_key():
    assert refusal({"A=B": "c"}) == ("env[0]: key 'A=B' is not an env key (a letter or underscore, then up to 127 "
                                     "letters, digits and underscores)")
    assert refusal({"A": [1]}) == "env[0]: the value of A must be a string or a number, not a list"
    assert parse_assignments([entry(env={"THREADS": 4})]).assignments[0].env == ("THREADS=4",)
    assert refusal({"OK": "1", "LD_PRELOAD": "/x.so"}).startswith("env[1]: LD_PRELOAD changes")


# -- values -----------------------------------------------------------------------------------

SPLITTERS = [chr(code) for code in range(0x3000) if len(("a%sb" % chr(code)).splitlines()) > 1]


def test_what_splitlines_splits_on_is_all_among_the_refused():
    assert set(SPLITTERS) >= set("\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")
    for char in SPLITTERS + ["\u2028", "\u2029"]:
        assert refusal(["A=x%sy" % char]).startswith("env[0]: the value of A holds U+%04X" % ord(char))


@pytest.mark.parametrize("code", list(range(0x00, 0x20)) + [0x7f] + list(range(0x80, 0xa0)) + [0x2028, 0x2029])
def test_every_c0_c1_and_separator_character_is_refused(code):
    message = refusal(["A=ok%s" % chr(code)])
    assert message.startswith("env[0]: the value of A holds U+%04X" % code)
    assert "at character 2" in message and message.endswith(DOC)
    assert message.isprintable()


@pytest.mark.parametrize("value", ["", "a=b", "nightly run; $(touch /tmp/pwned)", "caf\u00e9 \u00a0\u3000",
                                   "\U0001f600", "x" * 4000])
def test_a_value_of_one_line_of_text_is_kept_as_given(value):
    assert parse_assignments([entry(env=["A=%s" % value])]).assignments[0].env == ("A=%s" % value,)


# -- through the module and through the helper ---------------------------------------------------


def test_the_module_refuses_an_assignment_with_a_loader_key_and_binds_the_others(capsys, node):
    devices = [hold("a1", GPU_A, env=["TEAM=vision", "LD_PRELOAD=/var/lib/bcd/x.so"]),
               hold("a2", GPU_B, env=["PATH=/var/lib/bcd/bin:/usr/bin"]),
               hold("a3", GPU_B + "/s0", env=["NOTE=a\x0bb"]),
               hold("a4", GPU_B + "/s1", env=["TEAM=vision"])]
    result = run(capsys, node, generation=1, on_refusal="report", devices=devices)
    assert not result.get("failed")
    failures = dict((f["allocation_id"], (f["reason"], f["message"])) for f in result["failures"])
    assert failures == {
        "a1": ("invalid-assignment", "env[1]: LD_PRELOAD changes what programs load or run; a hold's env may not "
                                     "set it %s" % DOC),
        "a2": ("invalid-assignment", "env[0]: PATH changes what programs load or run; a hold's env may not set it "
                                     "%s" % DOC),
        "a3": ("invalid-assignment", "env[0]: the value of NOTE holds U+000B (a control character) at character 1; "
                                     "a value is one line without control characters %s" % DOC),
    }
    assert [h["allocation_id"] for h in result["holds"]] == ["a4"]
    assert not node.exists("/run/bcd/allocations/a1.env") and not node.exists("/etc/cdi/bcd-a2.json")


def test_the_helper_checks_a_hold_with_the_same_function():
    assert helper_entry.parse_hold_request is assignment.parse_hold_request


@pytest.mark.parametrize("env, error", [
    (["LD_PRELOAD="], "env[0]: LD_PRELOAD changes what programs load or run; a hold's env may not set it %s" % DOC),
    (["OK=1", "BASH_ENV=/var/lib/bcd/rc"],
     "env[1]: BASH_ENV steers the shell that reads it; a hold's env may not set it %s" % DOC),
    (["A=x\u2029y"], "env[0]: the value of A holds U+2029 (a paragraph separator) at character 1; a value is one "
                     "line without control characters %s" % DOC),
])
def test_a_helper_request_carrying_a_refused_line_is_refused_and_writes_nothing(helper, env, error):  # noqa: F811
    for kind in ("cdi", "allocation-env"):
        reply = helper.request({"op": "hold.write", "kind": kind, "hold": request(env=env)})
        assert reply == {"ok": False, "error": error}
    assert helper.files() == {}
    # and the same hold without the line is written
    assert helper.request({"op": "hold.write", "kind": "allocation-env", "hold": request(env=["OK=1"])})["ok"]


# -- issue 33: the families and the operator's allowlist through the module ---------------------------

ISSUE_33 = ["GIT_CONFIG_PARAMETERS", "GIT_EXTERNAL_DIFF", "GIT_PROXY_COMMAND", "GIT_SEQUENCE_EDITOR", "SSH_ASKPASS",
            "SUDO_ASKPASS", "FCEDIT", "OMPI_MCA_plm_rsh_agent", "PRTE_MCA_plm_ssh_agent",
            "PMIX_MCA_mca_base_component_path", "HWLOC_PLUGINS_PATH", "DBUS_SYSTEM_BUS_ADDRESS", "SLURM_PROCID"]


def test_the_module_refuses_every_key_the_issue_wrote_and_writes_no_env_file(capsys, node):
    devices = [hold("k%d" % index, GPU_B + "/s%d" % index if index < 2 else GPU_A, env=["TEAM=v", "%s=x" % key])
               for index, key in enumerate(ISSUE_33[:3])]
    result = run(capsys, node, generation=1, on_refusal="report", devices=devices)
    assert not result.get("failed") and result["holds"] == []
    assert sorted(f["allocation_id"] for f in result["failures"]) == ["k0", "k1", "k2"]
    for failure, key in zip(sorted(result["failures"], key=lambda f: f["allocation_id"]), ISSUE_33):
        assert failure["reason"] == "invalid-assignment"
        assert failure["message"].startswith("env[1]: %s " % key) and failure["message"].endswith(DOC)
    for index in range(3):
        assert not node.exists("/run/bcd/allocations/k%d.env" % index)
    for key in ISSUE_33:
        assert check_env_key(key) is not None, key


ALLOW_MESSAGE = ("env[1]: NCCL_DEBUG is not among the keys this node's env_allow accepts (2); a hold's env may not "
                 "set it %s" % DOC)


def test_an_allowlist_is_the_only_set_accepted(capsys, node):
    devices = [hold("a1", GPU_A, env=["TEAM=vision", "WANDB_PROJECT=x"]),
               hold("a2", GPU_B, env=["TEAM=vision", "NCCL_DEBUG=INFO"])]
    result = run(capsys, node, generation=1, on_refusal="report", devices=devices, env_allow=["TEAM", "WANDB_PROJECT"])
    assert [h["allocation_id"] for h in result["holds"]] == ["a1"]
    assert [(f["allocation_id"], f["reason"], f["message"]) for f in result["failures"]] == [
        ("a2", "invalid-assignment", ALLOW_MESSAGE)]
    assert b"WANDB_PROJECT=x" in node.read("/run/bcd/allocations/a1.env")
    assert not node.exists("/run/bcd/allocations/a2.env")
    # the default (fail) lists it in msg; without an allowlist the same key is kept
    failed = run(capsys, node, generation=2, devices=devices, env_allow=["TEAM", "WANDB_PROJECT"])
    assert failed["failed"] is True and ALLOW_MESSAGE in failed["msg"]
    kept = run(capsys, node, generation=3, devices=devices)
    assert not kept.get("failed") and sorted(h["allocation_id"] for h in kept["holds"]) == ["a1", "a2"]


@pytest.mark.parametrize("value, message", [
    (["TEAM", "LD_PRELOAD"], "env_allow[1]: LD_PRELOAD changes what programs load or run; a hold's env may not set "
                             "it %s; an allowlist cannot let it through" % DOC),
    (["SLURM_JOB_ID"], "env_allow[0]: SLURM_JOB_ID is what Slurm sets for a job and its tasks; a hold's env may not "
                       "set it %s; an allowlist cannot let it through" % DOC),
    (["A-B"], "env_allow[0]: 'A-B' is not an env key (a letter or underscore, then up to 127 letters, digits and "
              "underscores)"),
    (["BCD_ALLOCATION_ID"], "env_allow[0]: BCD_ALLOCATION_ID is set by bcd and cannot be overridden; an allowlist "
                            "cannot let it through"),
])
def test_an_allowlist_cannot_widen_the_policy(capsys, node, value, message):
    result = run(capsys, node, generation=1, devices=[hold("a1", GPU_A, env=["TEAM=x"])], env_allow=value)
    assert result["failed"] is True and result["msg"] == message
    assert not node.exists("/run/bcd/allocations/a1.env")


def test_the_timers_passes_keep_the_allowlist_the_last_task_gave(capsys, node):
    from ansible_collections.bcd.devices.tests.unit.plugins.module_utils.entry.test_cli import cli

    devices = [hold("a1", GPU_A, env=["TEAM=vision"]), hold("a2", GPU_B, env=["NCCL_DEBUG=INFO"])]
    run(capsys, node, generation=1, on_refusal="report", devices=devices, env_allow=["TEAM"],
        state_dir="/var/lib/bcd")
    assert json.loads(node.read("/var/lib/bcd/nodespec.json"))["env_allow"] == ["TEAM"]
    _code, out, _err = cli(capsys, node, "converge", "--stored", "--check", "--json")
    assert [(f["allocation_id"], f["reason"]) for f in json.loads(out)["failures"]] == [("a2", "invalid-assignment")]
    # a task without it stores none, and the timers accept what the policy allows again
    run(capsys, node, generation=2, on_refusal="report", devices=devices, state_dir="/var/lib/bcd")
    assert "env_allow" not in json.loads(node.read("/var/lib/bcd/nodespec.json"))
