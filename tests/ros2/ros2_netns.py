#!/usr/bin/env python3
"""Run ROS 2 processes in a network namespace of their own, with only lo up.

DDS discovery multicasts on every interface and finds every participant with the same domain id
on the LAN, so no ROS 2 process that a test or the demo starts may see the host's interfaces.
run_in_netns() makes one namespace (`unshare -n`) for a group of commands that must talk to each
other, runs them there and gives back each one's exit code and output; the namespace ends with
its last process. Only the standard library is used: any Python runs it.

    from ros2_netns import Command, can_make_netns, run_in_netns, ros_env, venv_python
    ok, why = can_make_netns()
    results = run_in_netns([Command([robot...], daemon=True, ready="ready"), [checker...]],
                           env=ros_env("jazzy"), timeout=60)

What was checked about Fast DDS (rmw_fastrtps_cpp, Jazzy's 2.14 and Kilted's 3.2) in such a
namespace, with nothing configured: participants discover each other over lo within about
0.2 s (also with UDP alone, FASTDDS_BUILTIN_TRANSPORTS=UDPv4, although lo has no MULTICAST
flag; also with ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST; a Jazzy and a Kilted process talk);
data between processes then goes through shared memory (/dev/shm/fastrtps_* for Jazzy,
fastdds_* for Kilted). Two namespaces side by side stay apart, because discovery goes over UDP,
which the namespace confines. Shared memory is NOT confined by a network namespace (/dev/shm is
the host's): with FASTDDS_BUILTIN_TRANSPORTS=SHM, processes in two different namespaces
discovered each other and exchanged messages (a process on the host would share that /dev/shm
too; not tried, since no ROS process runs outside a namespace here). So never restrict Fast DDS
to shared memory here; ros_env() removes that variable, and takes a ROS_DOMAIN_ID for runs that
want a second fence.

CLI:
    ros2_netns.py check                    exit 0 if a namespace can be made, else 77 and why
    ros2_netns.py env DISTRO               `export` lines of ros_env(DISTRO)
    ros2_netns.py run [--timeout S] [--distro D] [--daemon CMD [--ready LINE]]... [CMD]...
        runs the shell commands CMD in one namespace (with ros_env(D) if --distro), daemons
        first (each waited for until it prints LINE, when given), the others together; when the
        others have exited, the daemons get SIGINT. Prints each one's output; exits with the
        first non-zero exit code, 124 on timeout.
"""
import argparse
import dataclasses
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.environ.get("PI0_SOURCE_ROOT") or os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DISTROS = ("jazzy", "kilted")
STOP_GRACE_S = 5.0


@dataclasses.dataclass
class Command:
    """One process of a group. cmd: an argv list, or a string run by bash (else /bin/sh).
    daemon: runs until the others have exited, then gets SIGINT (SIGKILL STOP_GRACE_S later).
    ready: a stdout line to wait for before starting the next command (ready_timeout s).
    env: variables added to the group's environment for this one."""
    cmd: object
    daemon: bool = False
    ready: str = None
    ready_timeout: float = 20.0
    env: dict = None
    name: str = ""


@dataclasses.dataclass
class Result:
    name: str
    argv: list
    returncode: int      # -N: ended by signal N; None: never started or never ended
    stdout: str
    stderr: str
    timed_out: bool      # the group's timeout ended it
    error: str = ""      # why it did not start, or why its ready line never came


def venv_dir(distro, root=None):
    """A ROS venv made by scripts/setup.sh: <source root>/.ros-<distro>-venv."""
    return os.path.join(root or ROOT, f".ros-{distro}-venv")


def venv_python(distro, root=None):
    """The venv's Python: a launcher that sets LD_LIBRARY_PATH for the wheels, then runs 3.11."""
    return os.path.join(venv_dir(distro, root), "bin", "python")


def ros_env(distro, base=None, root=None, domain_id=None, log_dir=None):
    """The environment in which a C program (gst-launch-1.0 with the pi0ros2 plugin) or rclpy
    runs against the PyPI wheels of `distro`, as `source /opt/ros/<distro>/setup.bash` makes it
    for an apt install (scripts/ros2-env.sh is the shell twin):

    AMENT_PREFIX_PATH=<venv>: the ament index (share/ament_index) of the venv, where
        rmw_implementation looks for an RMW when RMW_IMPLEMENTATION names none and ROS tools
        look for packages.
    LD_LIBRARY_PATH=<venv>/lib plus every <venv>/lib/python3.11/site-packages/ros_*.libs:
        rmw loads each message package's type support with dlopen by name, which only searches
        LD_LIBRARY_PATH; the wheels' RPATHs ($ORIGIN/../../../ros_*.libs) point outside the
        venv's lib/, so the vendored libraries (tinyxml2, OpenSSL, lttng, yaml) are found
        through the ros_*.libs folders only.
    RMW_IMPLEMENTATION=rmw_fastrtps_cpp: the only RMW the wheels carry; said, not guessed.
    ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST (Jazzy and later): a second fence after the
        namespace; were a process started outside one, it would still only look on localhost.
        ROS_LOCALHOST_ONLY (deprecated in Jazzy, gone in Kilted) is removed, since it conflicts.
    ROS_DISTRO: for tools that read it.
    FASTDDS_BUILTIN_TRANSPORTS is removed: SHM only would cross namespaces (module doc).
    ROS_DOMAIN_ID, ROS_LOG_DIR: set when given (a test's own domain; logs out of ~/.ros).

    libpython3.11 is not preloaded here: the plugin links it (the wheels' librcl needs the
    Python bindings of rcl_interfaces)."""
    venv = venv_dir(distro, root)
    env = dict(os.environ if base is None else base)
    libs = [os.path.join(venv, "lib")]
    site = os.path.join(venv, "lib", "python3.11", "site-packages")
    if os.path.isdir(site):
        libs += sorted(os.path.join(site, d) for d in os.listdir(site)
                       if d.startswith("ros_") and d.endswith(".libs"))
    if env.get("LD_LIBRARY_PATH"):
        libs.append(env["LD_LIBRARY_PATH"])
    env.update(AMENT_PREFIX_PATH=venv, LD_LIBRARY_PATH=":".join(libs),
               RMW_IMPLEMENTATION="rmw_fastrtps_cpp", ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST",
               ROS_DISTRO=distro)
    env.pop("ROS_LOCALHOST_ONLY", None)
    env.pop("FASTDDS_BUILTIN_TRANSPORTS", None)
    if domain_id is not None:
        env["ROS_DOMAIN_ID"] = str(domain_id)
    if log_dir is not None:
        env["ROS_LOG_DIR"] = log_dir
    return env


def _unshare_argv():
    # As root a new network namespace is enough; otherwise map ourselves to root in a new user
    # namespace first, where the kernel allows it.
    return ["unshare", "-n"] if os.geteuid() == 0 else ["unshare", "-r", "-n"]


def can_make_netns():
    """(True, "") if run_in_netns() can work here, else (False, why) for a skip message."""
    if not sys.platform.startswith("linux"):
        return False, "network namespaces need Linux"
    for tool in ("unshare", "ip"):
        if not shutil.which(tool):
            return False, f"no `{tool}` on PATH (util-linux, iproute2)"
    try:
        p = subprocess.run(_unshare_argv() + ["ip", "link", "set", "lo", "up"],
                           capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"unshare failed: {e}"
    if p.returncode != 0:
        who = "" if os.geteuid() == 0 else " (not root, and no user namespaces)"
        return False, f"cannot make a network namespace{who}: {p.stderr.strip()}"
    return True, ""


def _argv(cmd):
    # bash, not dash: a dash waiting for its child dies of the SIGINT that stops a daemon even
    # when the child handles it and exits 0; bash exits with the child's status (and execs a
    # lone simple command outright).
    shell = shutil.which("bash") or "/bin/sh"
    return [shell, "-c", cmd] if isinstance(cmd, str) else [str(c) for c in cmd]


def run_in_netns(cmds, env=None, timeout=60.0, cwd=None):
    """Runs `cmds` (Command, argv list, or shell string each) in one new network namespace with
    only lo up and returns a Result per command, in order. Commands start in order (a Command
    with `ready` is waited for first); non-daemons run together and are waited for; then the
    daemons get SIGINT. After `timeout` seconds everything still running gets SIGINT, then
    SIGKILL STOP_GRACE_S later, and is marked timed_out. Raises RuntimeError if no namespace
    can be made."""
    cmds = [c if isinstance(c, Command) else Command(c) for c in cmds]
    env = dict(os.environ if env is None else env)
    with tempfile.TemporaryDirectory(prefix="pi0-netns-") as tmp:
        spec = {"timeout": timeout, "cwd": cwd or os.getcwd(), "env": env, "dir": tmp,
                "cmds": [dict(dataclasses.asdict(c), argv=_argv(c.cmd),
                              name=c.name or f"cmd{i}") for i, c in enumerate(cmds)]}
        for c in spec["cmds"]:
            del c["cmd"]
        spec_path = os.path.join(tmp, "spec.json")
        with open(spec_path, "w", encoding="utf-8") as f:
            json.dump(spec, f)
        sup = subprocess.Popen(_unshare_argv() + [sys.executable, os.path.abspath(__file__),
                                                  "_supervise", spec_path],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
        try:
            out, err = sup.communicate(timeout=timeout + 3 * STOP_GRACE_S + 30)
        except subprocess.TimeoutExpired:
            # The supervisor enforces the timeout itself; this is for a supervisor that hangs.
            os.killpg(sup.pid, signal.SIGKILL)
            out, err = sup.communicate()
        results_path = os.path.join(tmp, "results.json")
        if not os.path.exists(results_path):
            raise RuntimeError(f"no network namespace (exit {sup.returncode}): "
                               f"{(err or out).strip()}")
        with open(results_path, encoding="utf-8") as f:
            return [Result(**r) for r in json.load(f)]


# --- inside the namespace ------------------------------------------------------------------

def _child_setup():
    # Dies with the supervisor, so that nothing outlives the group in the namespace.
    import ctypes
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _killpg(pgid, sig):
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _supervise(spec_path):
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    up = subprocess.run(["ip", "link", "set", "lo", "up"], capture_output=True, text=True)
    if up.returncode != 0:
        print(f"ip link set lo up: {up.stderr.strip()}", file=sys.stderr)
        return 1
    deadline = time.monotonic() + spec["timeout"]
    results = [{"name": c["name"], "argv": c["argv"], "returncode": None, "stdout": "",
                "stderr": "", "timed_out": False, "error": "not started: an earlier one failed",
                "_out": os.path.join(spec["dir"], f"{i}.out"),
                "_err": os.path.join(spec["dir"], f"{i}.err"), "_daemon": c["daemon"]}
               for i, c in enumerate(spec["cmds"])]
    for r in results:
        open(r["_out"], "wb").close()
        open(r["_err"], "wb").close()
    procs = [None] * len(results)
    for i, c in enumerate(spec["cmds"]):
        res = results[i]
        res["error"] = ""
        out_path, err_path = res["_out"], res["_err"]
        env = dict(spec["env"], **(c["env"] or {}))
        try:
            with open(out_path, "wb") as out, open(err_path, "wb") as err:
                p = subprocess.Popen(c["argv"], stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                     env=env, cwd=spec["cwd"], start_new_session=True,
                                     preexec_fn=_child_setup)
        except OSError as e:
            res["error"] = f"could not start: {e}"
            break
        procs[i] = p
        if c["ready"]:
            until = min(deadline, time.monotonic() + c["ready_timeout"])
            while True:
                with open(out_path, "rb") as f:
                    lines = f.read().decode(errors="replace").splitlines()
                if c["ready"] in lines:
                    break
                if p.poll() is not None or time.monotonic() > until:
                    res["error"] = f"no line {c['ready']!r} on stdout"
                    break
                time.sleep(0.02)
            if res["error"]:
                break  # the rest would run against a peer that is not there

    def stop(which, timed_out):
        for p, r in which:
            if p.poll() is None:
                r["timed_out"] = timed_out
                _killpg(p.pid, signal.SIGINT)
        until = time.monotonic() + STOP_GRACE_S
        for p, _ in which:
            try:
                p.wait(max(0.0, until - time.monotonic()))
            except subprocess.TimeoutExpired:
                _killpg(p.pid, signal.SIGKILL)
                p.wait()

    pairs = [(p, r) for p, r in zip(procs, results) if p is not None]
    workers = [(p, r) for p, r in pairs if not r["_daemon"]]
    failed_start = any(r["error"] for r in results)
    for p, r in workers:
        if failed_start:
            break
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            break
    stop(workers, timed_out=not failed_start)
    stop([(p, r) for p, r in pairs if r["_daemon"]],
         timed_out=time.monotonic() > deadline)
    for p, r in pairs:
        r["returncode"] = p.returncode
    for r in results:
        for key in ("out", "err"):
            with open(r.pop(f"_{key}"), "rb") as f:
                r[f"std{key}"] = f.read().decode(errors="replace")
        del r["_daemon"]
    with open(os.path.join(spec["dir"], "results.json"), "w", encoding="utf-8") as f:
        json.dump(results, f)
    return 0


# --- CLI --------------------------------------------------------------------------------------

def main(argv):
    if argv[:1] == ["_supervise"]:
        return _supervise(argv[1])
    p = argparse.ArgumentParser(description="ROS 2 processes in a network namespace of their "
                                            "own (only lo up).")
    sub = p.add_subparsers(dest="what", required=True)
    sub.add_parser("check", help="can a namespace be made here? (exit 0, or 77 and why)")
    e = sub.add_parser("env", help="print `export` lines of the environment for a ROS venv")
    e.add_argument("distro", choices=DISTROS)
    r = sub.add_parser("run", help="run shell commands in one namespace")
    r.add_argument("--timeout", type=float, default=60.0)
    r.add_argument("--distro", choices=DISTROS, help="run with ros_env(DISTRO)")
    r.add_argument("--daemon", action="append", default=[], metavar="CMD",
                   help="started first, stopped with SIGINT when the others have exited")
    r.add_argument("--ready", action="append", default=[], metavar="LINE",
                   help="the line the daemon before it prints when ready (in order)")
    r.add_argument("cmd", nargs="*")
    a = p.parse_args(argv)
    if a.what == "check":
        ok, why = can_make_netns()
        print("ok" if ok else f"SKIP: {why}")
        return 0 if ok else 77
    if a.what == "env":
        env = ros_env(a.distro, base={})
        for k in sorted(env):
            print(f"export {k}={shlex.quote(env[k])}")
        return 0
    if len(a.ready) > len(a.daemon):
        p.error("more --ready than --daemon")
    ok, why = can_make_netns()
    if not ok:
        print(f"SKIP: {why}", file=sys.stderr)
        return 77
    cmds = [Command(d, daemon=True, ready=a.ready[i] if i < len(a.ready) else None,
                    name=f"daemon{i}") for i, d in enumerate(a.daemon)]
    cmds += [Command(c, name=f"cmd{i}") for i, c in enumerate(a.cmd)]
    results = run_in_netns(cmds, env=ros_env(a.distro) if a.distro else None,
                           timeout=a.timeout)
    rc = 0
    for res in results:
        print(f"--- {res.name}: {shlex.join(res.argv)}\n    exit {res.returncode}"
              + (" (timed out)" if res.timed_out else "")
              + (f" ({res.error})" if res.error else ""))
        for key in ("stdout", "stderr"):
            text = getattr(res, key)
            if text:
                print(f"    {key}:\n" + "".join(f"      {line}\n" for line in text.splitlines()),
                      end="")
        if res.timed_out and not rc:
            rc = 124
        elif not rc and (res.error or res.returncode != 0):
            rc = res.returncode if res.returncode not in (None, 0) else 1
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
