# -*- coding: utf-8 -*-
# Copyright: contributors to bcd.devices
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The env policy: which ``KEY=VALUE`` lines a hold's ``env`` may carry (docs/security.md, "The env policy").

A hold's env lines are data for the workload: they end in the env file (``/run/bcd/allocations``) and
in the CDI spec's ``containerEdits.env``, which root-run launchers, container runtimes and their
hooks read before the workload's own code runs. So a key that changes *what a program loads or
runs* (a search path, a preload, a shell's startup file, an interpreter's options), that steers
the GPU stack or systemd's service protocol, or that is bcd's own, is refused, whatever its value.
A workload that needs one sets it itself, in its image or its script, where it binds no one else.

``POLICY`` below is the whole policy, one entry per name or family, each with its reason. Keys
match case-sensitively (Linux's environment is), so the lower-case spellings programs read are
listed where they matter. ``check_env_key`` and ``check_env_value`` are what ``domain/input/assignment.py``
calls, for the module's input and the root helper's ``hold.write`` alike.
"""

from __future__ import annotations

from typing import Collection, Final, Literal, NamedTuple, Optional, Set, Tuple, Union

from ansible_collections.bcd.devices.plugins.module_utils.support.speed import lazy_pattern
from ansible_collections.bcd.devices.plugins.module_utils.support.text import quoted

# A key: a C identifier of at most 128 characters. Everything that reads env files and every shell
# agrees on these; anything else (``A-B``, ``BASH_FUNC_f%%``, a space, a dot) means different things
# to different readers.
ENV_KEY_RE = lazy_pattern(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# ENV_KEY_RE in words, as a refusal says it: a refusal is journaled, and no event may hold a curly bracket
# (domain/event_grammar.py)
ENV_KEY_SAID = "a letter or underscore, then up to 127 letters, digits and underscores"

# What a refusal says after the key; each family below names one of these.
LOADS = "changes what programs load or run"
SHELL = "steers the shell that reads it"
GPU = "steers the GPU driver or the container toolkit"
RESOLVER = "steers how programs resolve host names"
SERVICE = "is what systemd hands a service"
FILES = "places the files programs create"
BCD = "is set by bcd and cannot be overridden"

SLURM = "is what Slurm sets for a job and its tasks"
BUS = "steers which bus or manager a program talks to"

# How a rule's ``key`` matches: the name itself, a prefix (``LD_``: every key starting so), or a pattern
# (a regular expression that must match the whole key: ``.*_ASKPASS``). A family is named by what makes
# its members dangerous, not by the members someone thought of: every key git reads is ``GIT_*``, every
# program that asks for a password runs ``*ASKPASS``, every editor a program starts is ``*EDITOR``.
EXACT: Final = False
PREFIX: Final = True
PATTERN: Final = "pattern"
Matching = Union[bool, Literal["pattern"]]  # EXACT, PREFIX or PATTERN


class Rule(NamedTuple):
    """One entry of the policy: ``key`` (a name, a prefix or a pattern: ``prefix`` says which), what a refusal
    says after the key (``says``), and ``why``."""

    key: str
    prefix: Matching
    says: str
    why: str


def _rules(says: str, prefix: Matching, why: str, *keys: str) -> Tuple[Rule, ...]:
    return tuple(Rule(key, prefix, says, why) for key in keys)


POLICY = (
    # -- bcd's own lines (the env file's first lines and the CDI spec's env) ------------------------
    _rules(BCD, True, "bcd writes BCD_ALLOCATION_ID, BCD_RESERVATION_ID and BCD_CGROUP_PARENT itself; "
           "a launcher picks the slice from BCD_CGROUP_PARENT", "BCD_")
    + _rules(BCD, False, "bcd writes them: the devices of the hold and the MPS server of its slots",
             "NVIDIA_VISIBLE_DEVICES", "CUDA_MPS_PIPE_DIRECTORY")
    # -- the dynamic loader and the C library ------------------------------------------------------
    + _rules(LOADS, True, "ld.so reads LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT and the rest: a library of "
             "the line's choosing runs inside every program started", "LD_")
    + _rules(LOADS, False, "glibc's tunables (a root exploit in 2023, CVE-2023-4911), malloc's debugging "
             "hooks, iconv modules, locale and message catalogues: each makes the C library read or "
             "load a file of the line's choosing", "GLIBC_TUNABLES", "GCONV_PATH", "LOCPATH", "NLSPATH")
    + _rules(LOADS, True, "malloc's debugging and tracing (MALLOC_CHECK_, MALLOC_TRACE writes a file)",
             "MALLOC_")
    + _rules(LOADS, False, "OpenSSL loads engines and providers named by its configuration",
             "OPENSSL_CONF", "OPENSSL_MODULES", "OPENSSL_ENGINES")
    # -- where commands are found and what a shell runs on start ------------------------------------
    + _rules(LOADS, False, "which program a command name runs, and which startup files, site "
             "packages and configuration programs read from the home directory",
             "PATH", "HOME", "XDG_CONFIG_HOME", "XDG_CONFIG_DIRS", "SHELL")
    + _rules(SHELL, False, "a shell runs BASH_ENV and ENV before its script, PROMPT_COMMAND and PS4 "
             "(with xtrace) are run, SHELLOPTS and BASHOPTS turn on options (xtrace, functions "
             "imported), IFS and CDPATH change how a script's own words and cd read, FPATH and ZDOTDIR "
             "load functions and startup files", "ENV", "IFS", "CDPATH", "SHELLOPTS", "BASHOPTS", "PS4",
             "PROMPT_COMMAND", "FPATH", "ZDOTDIR")
    + _rules(SHELL, True, "bash's own variables (BASH_ENV, BASH_XTRACEFD, BASH_COMPAT, BASH_LOADABLES_PATH)",
             "BASH_")
    # -- interpreters and their options -------------------------------------------------------------
    + _rules(LOADS, True, "PYTHONPATH, PYTHONSTARTUP, PYTHONHOME, PYTHONUSERBASE and the rest load code "
             "or change which interpreter runs", "PYTHON")
    + _rules(LOADS, True, "PERL5LIB and PERL5OPT (-M loads a module), PERL5DB", "PERL5")
    + _rules(LOADS, False, "the older spelling of PERL5LIB", "PERLLIB")
    + _rules(LOADS, True, "RUBYOPT (-r loads a file), RUBYLIB; gems from GEM_PATH and GEM_HOME",
             "RUBY", "GEM_")
    + _rules(LOADS, False, "node's --require and --import, and its module path",
             "NODE_OPTIONS", "NODE_PATH")
    + _rules(LOADS, False, "every JVM reads these as command-line options (-javaagent: loads code), "
             "and its class path", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "CLASSPATH")
    + _rules(LOADS, True, "LUA_INIT runs code; LUA_PATH and LUA_CPATH load modules", "LUA_")
    + _rules(LOADS, True, "TCLLIBPATH and TCL_LIBRARY load Tcl code", "TCL")
    # -- the GPU stack --------------------------------------------------------------------------------
    + _rules(GPU, True, "the NVIDIA container toolkit's hooks run as root and read NVIDIA_* (which "
             "devices and driver capabilities a container gets, NVIDIA_REQUIRE_* checks)", "NVIDIA_")
    + _rules(GPU, True, "the CUDA driver reads CUDA_* (CUDA_INJECTION64_PATH loads a library, "
             "CUDA_VISIBLE_DEVICES renumbers the hold's devices)", "CUDA_")
    + _rules(LOADS, False, "NCCL loads a plugin library named by these",
             "NCCL_NET_PLUGIN", "NCCL_TUNER_PLUGIN", "NCCL_PROFILER_PLUGIN")
    + _rules(LOADS, True, "the Vulkan, EGL, GLX and OpenCL loaders load the driver or layer libraries these "
             "name (VK_ICD_FILENAMES, VK_LAYER_PATH, __EGL_VENDOR_LIBRARY_FILENAMES, OCL_ICD_VENDORS)",
             "VK_", "__EGL_", "__GLX_", "OCL_ICD_", "LIBGL_")
    + _rules(LOADS, False, "MPI and the fabric libraries load components and providers from these directories",
             "OMPI_MCA_mca_base_component_path", "OPAL_PREFIX", "PRTE_PREFIX", "PMIX_PREFIX", "UCX_MODULE_DIR",
             "FI_PROVIDER_PATH")
    + _rules(LOADS, PATTERN, "Open MPI, PRRTE, PMIx and OPAL read any MCA parameter from <PROJECT>_MCA_<name>: "
             "plm_rsh_agent and plm_ssh_agent name the program that starts remote ranks, "
             "mca_base_component_path the directories components load from", "[A-Za-z0-9_]*_MCA_.*")
    + _rules(LOADS, PREFIX, "MPICH's and Intel MPI's Hydra run the launcher and bootstrap programs these name "
             "(HYDRA_LAUNCHER_EXEC, I_MPI_HYDRA_BOOTSTRAP_EXEC)", "HYDRA_", "I_MPI_HYDRA_")
    + _rules(LOADS, PREFIX, "hwloc loads plugins from HWLOC_PLUGINS_PATH and takes the machine's topology "
             "from HWLOC_XMLFILE, HWLOC_FSROOT and HWLOC_COMPONENTS, which MPI and NCCL bind ranks by",
             "HWLOC_")
    + _rules(LOADS, PATTERN, "a library loads code from the directories or files a key named so lists "
             "(HWLOC_PLUGINS_PATH, GST_PLUGIN_PATH, QT_PLUGIN_PATH, UCX_MODULE_DIR, FI_PROVIDER_PATH, "
             "DYLD_LIBRARY_PATH)",
             "[A-Za-z0-9_]*(PLUGIN|PLUGINS|MODULE|MODULES|COMPONENT|COMPONENTS|PROVIDER|PROVIDERS)_"
             "(PATH|PATHS|DIR|DIRS|FILE|FILES|DIRECTORY)",
             "[A-Za-z0-9_]*(LIBRARY_PATH|_PRELOAD)")
    + _rules(LOADS, False, "toolkits load modules and plugins from these (GTK, GIO, GStreamer, Qt, gdk-pixbuf), "
             "and R, Julia and PHP read startup code or configuration from them",
             "GTK_MODULES", "GTK_PATH", "GIO_EXTRA_MODULES", "GST_PLUGIN_PATH", "GST_PLUGIN_SYSTEM_PATH",
             "QT_PLUGIN_PATH", "GDK_PIXBUF_MODULE_FILE", "R_PROFILE", "R_PROFILE_USER", "R_ENVIRON",
             "R_ENVIRON_USER", "R_LIBS", "R_LIBS_USER", "JULIA_LOAD_PATH", "JULIA_DEPOT_PATH", "PHPRC",
             "PHP_INI_SCAN_DIR")
    + _rules(LOADS, False, "a program runs the pager, editor, less filter or browser these name "
             "(fc runs FCEDIT)", "VISUAL", "FCEDIT", "LESSOPEN", "LESSCLOSE")
    + _rules(LOADS, PATTERN, "a program runs the editor, pager or browser a key named so names (EDITOR, "
             "SUDO_EDITOR, GIT_SEQUENCE_EDITOR, PAGER, MANPAGER, BROWSER), and the command a *_COMMAND "
             "key holds (GIT_PROXY_COMMAND, PROMPT_COMMAND)",
             "[A-Za-z0-9_]*(EDITOR|PAGER|BROWSER)", "[A-Za-z0-9_]*_COMMAND")
    + _rules(LOADS, PATTERN, "ssh, sudo, git and the rest run the password prompt a *ASKPASS key names "
             "(SSH_ASKPASS, SUDO_ASKPASS, GIT_ASKPASS; SSH_ASKPASS_REQUIRE forces it)", "[A-Za-z0-9_]*ASKPASS[A-Za-z0-9_]*")
    + _rules(LOADS, PREFIX, "git reads GIT_* as commands to run and configuration: GIT_CONFIG_PARAMETERS and "
             "GIT_CONFIG_COUNT with GIT_CONFIG_KEY_n set any configuration (core.sshCommand, core.fsmonitor "
             "run programs), GIT_EXTERNAL_DIFF, GIT_PROXY_COMMAND, GIT_SSH_COMMAND and GIT_SEQUENCE_EDITOR run "
             "one, GIT_EXEC_PATH and GIT_DIR choose what runs and which repository's hooks", "GIT_")
    + _rules(FILES, False, "TLS libraries write every session key to the file SSLKEYLOGFILE names",
             "SSLKEYLOGFILE")
    # -- name resolution --------------------------------------------------------------------------------
    + _rules(RESOLVER, False, "the resolver reads HOSTALIASES and RESOLV_HOST_CONF as files, and "
             "LOCALDOMAIN and RES_OPTIONS change every lookup", "HOSTALIASES", "RESOLV_HOST_CONF",
             "LOCALDOMAIN", "RES_OPTIONS")
    # -- systemd's service protocol -------------------------------------------------------------------
    + _rules(SERVICE, True, "systemd's tools read SYSTEMD_* (SYSTEMD_PAGER runs a program); LISTEN_* "
             "hands a program sockets, WATCHDOG_* its watchdog", "SYSTEMD_", "LISTEN_", "WATCHDOG_")
    + _rules(SERVICE, False, "a program believes these came from systemd: where to report readiness and "
             "its main PID, where its credentials lie, its invocation and journal stream",
             "NOTIFY_SOCKET", "CREDENTIALS_DIRECTORY", "INVOCATION_ID", "JOURNAL_STREAM", "MAINPID",
             "MANAGERPID")
    + _rules(BUS, PREFIX, "D-Bus clients (systemctl, busctl, every sd-bus and libdbus program) connect to "
             "the bus DBUS_SYSTEM_BUS_ADDRESS, DBUS_SESSION_BUS_ADDRESS or DBUS_STARTER_ADDRESS names, and take "
             "its answers as the system's", "DBUS_")
    + _rules(BUS, False, "systemctl --user, sd-bus and the session's tools find their manager and bus under it",
             "XDG_RUNTIME_DIR")
    # -- the batch scheduler ----------------------------------------------------------------------------
    + _rules(SLURM, PREFIX, "Slurm hands a job's tasks SLURM_* (SLURM_JOB_ID, SLURM_PROCID, SLURM_CPU_BIND, "
             "SLURM_STEP_GPUS), and srun, sbatch and salloc read their options from SLURM_*, SBATCH_*, "
             "SALLOC_* and SRUN_*: a hold's line would override the scheduler's own", "SLURM_", "SBATCH_",
             "SALLOC_", "SRUN_")
    # -- temporary files ----------------------------------------------------------------------------
    + _rules(FILES, False, "a directory another account can write, as every program's temporary "
             "directory, is the classic link race", "TMPDIR", "TMP", "TEMP")
)

_EXACT = dict((rule.key, rule) for rule in POLICY if rule.prefix is EXACT)
_PREFIXES = tuple(rule for rule in POLICY if rule.prefix is PREFIX)
_PATTERNS = tuple((lazy_pattern("(?:%s)" % rule.key), rule) for rule in POLICY if rule.prefix == PATTERN)

DOC = 'docs/security.md, "The env policy"'


def rule_for(key: str) -> Optional[Rule]:
    """The rule that refuses ``key``, or None when the policy allows it."""
    rule = _EXACT.get(key)
    if rule is not None:
        return rule
    for rule in _PREFIXES:
        if key.startswith(rule.key):
            return rule
    for pattern, rule in _PATTERNS:
        if pattern.fullmatch(key):
            return rule
    return None


def check_env_key(key: str) -> Optional[str]:
    """None when a hold's env may set ``key`` (a string matching ``ENV_KEY_RE``), else why not: the
    key and what it does, for a message that starts ``env[N]: ``."""
    rule = rule_for(key)
    if rule is None:
        return None
    if rule.says == BCD:
        return "%s %s" % (key, BCD)
    return "%s %s; a hold's env may not set it (%s)" % (key, rule.says, DOC)


# -- the operator's allowlist ---------------------------------------------------------------------

MAX_ALLOWED_KEYS = 256


def parse_env_allow(value: object, where: str = "env_allow") -> Optional[Tuple[str, ...]]:
    """``env_allow`` (the module's option, the role's ``bcd_holds_env_allow``, the timers' stored input):
    None (every key the policy allows) or a list of at most ``MAX_ALLOWED_KEYS`` keys, each matching
    ``ENV_KEY_RE`` and not one the policy refuses (an allowlist narrows the policy, never widens it), as a
    sorted tuple; ``ValueError`` naming the entry otherwise."""
    if value is None:
        return None
    if not isinstance(value, (list, tuple)):
        raise ValueError("%s: must be a list of env keys, not %s" % (where, type(value).__name__))
    if len(value) > MAX_ALLOWED_KEYS:
        raise ValueError("%s: more than %d keys" % (where, MAX_ALLOWED_KEYS))
    keys: Set[str] = set()
    for index, key in enumerate(value):
        if not isinstance(key, str) or not ENV_KEY_RE.fullmatch(key):
            raise ValueError("%s[%d]: %s is not an env key (%s)" % (where, index, quoted(key), ENV_KEY_SAID))
        why = check_env_key(key)
        if why:
            raise ValueError("%s[%d]: %s; an allowlist cannot let it through" % (where, index, why))
        keys.add(key)
    return tuple(sorted(keys))


def check_env_allowed(key: str, allow: Optional[Collection[str]]) -> Optional[str]:
    """None when ``allow`` (``parse_env_allow``'s tuple, or None: no allowlist) takes ``key``, else why not,
    for a message that starts ``env[N]: ``."""
    if allow is None or key in allow:
        return None
    return ("%s is not among the keys this node's env_allow accepts (%d); a hold's env may not set it (%s)"
            % (key, len(allow), DOC))


# Control characters: C0, DEL, C1, and the line and paragraph separators; with them, everything
# ``str.splitlines()`` splits on (\x0b \x0c \x1c-\x1e \x85 are among C0 and C1).
_CONTROL_RE = lazy_pattern("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_NAMES = {0x00: "NUL", 0x0a: "a newline", 0x0d: "a carriage return", 0x09: "a tab", 0x1b: "ESC",
          0x85: "a C1 newline", 0x2028: "a line separator", 0x2029: "a paragraph separator"}


def check_env_value(key: str, value: str) -> Optional[str]:
    """None when ``value`` is one line of text, else why not (for ``env[N]: ``)."""
    found = _CONTROL_RE.search(value)
    if found is None:
        return None
    code = ord(found.group())
    name = _NAMES.get(code, "a control character")
    return ("the value of %s holds U+%04X (%s) at character %d; a value is one line without control "
            "characters (%s)" % (key, code, name, found.start(), DOC))
