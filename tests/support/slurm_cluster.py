"""A SLURM cluster on this machine, for trying a job before spending allocation hours, and for tests.

    sudo .venv/bin/python tests/support/slurm_cluster.py --dir /tmp/slurm --nodes 2
    export SLURM_CONF=/tmp/slurm/slurm.conf SLURM_ACCOUNT=lab     # in another shell
    python -m olmocr.train cluster=slurm hydra.launcher.tasks_per_node=2 hydra.launcher.gpus_per_task=0 …

The real daemons (Debian's ``slurmctld``, ``slurmd``, ``slurmdbd``, ``munge`` and ``mariadb-server``
packages), each started in the foreground as a child of this process and ended by its PID: munged with a
key of its own, a MariaDB for the accounting database, slurmdbd, slurmctld and one slurmd per node, all
on loopback ports, state and logs under ``--dir``. Nodes share this host: node *i* is named and
addressed ``127.0.0.i`` (names that resolve, so ``MASTER_ADDR`` from a job's node list works). One
partition (``debug``), one account (``lab``) that jobs must name (associations are enforced, as on a
site cluster), partition limits checked at submission. Needs root: slurmd starts jobs as their user.
Ctrl-C cancels every job and stops the daemons.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time

from olmocr.errors import UserError

PROGRAMS = ("munged", "mariadbd", "mariadb-install-db", "slurmdbd", "slurmctld", "slurmd", "sbatch", "sacctmgr")
PACKAGES = "slurmctld slurmd slurmdbd slurm-client munge mariadb-server"
CLUSTER, PARTITION, ACCOUNT = "olmocr", "debug", "lab"


def missing() -> str | None:
    """Why a local cluster cannot start here (one line), or None."""
    absent = [p for p in PROGRAMS if shutil.which(p) is None and not os.path.exists(f"/usr/sbin/{p}")]
    if absent:
        return (f"a local SLURM cluster needs {', '.join(absent)}: apt-get install --no-install-recommends "
                f"{PACKAGES} (scripts/setup.sh --dev does, as root)")
    if os.geteuid() != 0:
        return "a local SLURM cluster needs root: slurmd starts each job as the user who submitted it"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def program(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


def running(pid: int) -> bool:
    """Whether the process is alive (a zombie left for its parent to reap is not)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def command_line(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def end(pid: int, grace_s: float = 15) -> None:
    """SIGTERM, then SIGKILL after ``grace_s``; returns once the process is gone."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        while running(pid) and time.monotonic() < deadline:
            try:
                os.waitpid(pid, os.WNOHANG)  # ours: reap it
            except ChildProcessError:
                pass
            time.sleep(0.1)
        if not running(pid):
            return


class LocalSlurm:
    def __init__(self, root: str, nodes: int = 2, cpus: int | None = None, kill_wait_s: int = 5):
        if nodes < 1 or nodes > 250:
            raise UserError(f"nodes={nodes}: a local cluster has 1 to 250 nodes (127.0.0.1 to 127.0.0.250)")
        self.root = os.path.abspath(root)
        self.nodes = [f"127.0.0.{i}" for i in range(1, nodes + 1)]
        self.cpus = cpus or os.cpu_count() or 1
        self.kill_wait_s = kill_wait_s
        self.conf = os.path.join(self.root, "slurm.conf")
        self._procs: list[tuple[str, subprocess.Popen]] = []

    # What a client needs: every SLURM command reads the cluster from SLURM_CONF.
    def environment(self) -> dict[str, str]:
        return {"SLURM_CONF": self.conf}

    def path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    def start(self) -> LocalSlurm:
        why = missing()
        if why:
            raise RuntimeError(why)
        self.stop()  # what a previous run in this folder left running (a kill -9 of its owner)
        for sub in ("munge", "state", "db", *(f"spool/{n}" for n in self.nodes)):
            os.makedirs(self.path(sub), exist_ok=True)
        os.chmod(self.path("munge"), 0o700)
        try:
            self._munge()
            self._database()
            self._write_configs()
            self._daemon("slurmdbd", [program("slurmdbd"), "-D"])
            self._wait(lambda: self._ok(["sacctmgr", "-n", "list", "cluster"]), "slurmdbd", "slurmdbd.log")
            self._associations()
            self._daemon("slurmctld", [program("slurmctld"), "-D", "-i", "-f", self.conf])
            self._wait(lambda: self._ok(["scontrol", "ping"]) and "UP" in self._out(["scontrol", "ping"]),
                       "slurmctld", "slurmctld.log")
            for node in self.nodes:
                self._daemon(f"slurmd {node}", [program("slurmd"), "-D", "-N", node, "-f", self.conf])
            self._wait(self._nodes_idle, "slurmd", f"slurmd-{self.nodes[0]}.log")
        except BaseException:
            self.stop()
            raise
        return self

    def __enter__(self) -> LocalSlurm:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        """Cancels every job (so no job step outlives the cluster), then ends the daemons by the PIDs the
        folder records, newest first (so it works from any process, not only the one that started them)."""
        if not os.path.exists(self.path("pids")):
            return
        # Only processes that still are those daemons: a PID from a folder left by a rebooted machine may
        # belong to anything now.
        daemons = [(name, pid) for name, pid in (line.split() for line in open(self.path("pids")) if line.strip())
                   if name in command_line(int(pid))]
        if any(name == "slurmctld" and running(int(pid)) for name, pid in daemons):
            subprocess.run(["scancel", "--full", f"--partition={PARTITION}"], env=self._env(),
                           capture_output=True, timeout=30)
            deadline = time.monotonic() + self.kill_wait_s + 15
            while self._out(["squeue", "-h", "-o", "%i"]) and time.monotonic() < deadline:
                time.sleep(0.5)
        # One at a time: slurmctld saves its state to slurmdbd, which writes to the database, which needs munge.
        for _, pid in reversed(daemons):
            end(int(pid))
        self._procs.clear()
        os.remove(self.path("pids"))

    # -- start-up steps
    def _munge(self) -> None:
        key = self.path("munge", "munge.key")
        if not os.path.exists(key):
            with open(os.open(key, os.O_WRONLY | os.O_CREAT, 0o400), "wb") as fh:
                fh.write(secrets.token_bytes(1024))
        self.munge_socket = self.path("munge", "socket")
        self._daemon("munged", [program("munged"), "-F", "--force", f"--socket={self.munge_socket}",
                                f"--key-file={key}", f"--pid-file={self.path('munge', 'pid')}",
                                f"--log-file={self.path('munge', 'log')}", f"--seed-file={self.path('munge', 'seed')}"])
        self._wait(lambda: os.path.exists(self.munge_socket), "munged", "munge/log")

    def _database(self) -> None:
        datadir = self.path("db")
        if not os.path.exists(os.path.join(datadir, "mysql")):
            subprocess.run([program("mariadb-install-db"), "--no-defaults", f"--datadir={datadir}", "--user=root",
                            "--auth-root-authentication-method=normal", "--skip-test-db"],
                           check=True, capture_output=True, timeout=120)
        self.db_port = free_port()
        self._daemon("mariadbd", [program("mariadbd"), "--no-defaults", f"--datadir={datadir}",
                                  f"--socket={self.path('db.sock')}", f"--port={self.db_port}",
                                  "--bind-address=127.0.0.1", "--user=root", "--skip-name-resolve",
                                  f"--log-error={self.path('db.log')}", "--innodb-buffer-pool-size=32M",
                                  "--innodb-lock-wait-timeout=900"])

        def answers() -> bool:
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", self.db_port)) == 0

        self._wait(answers, "mariadbd", "db.log")

    def _write_configs(self) -> None:
        self.dbd_port, self.ctld_port = free_port(), free_port()
        auth = f"AuthType=auth/munge\nAuthInfo=socket={self.munge_socket},cred_expire=5\n"
        dbd = (f"{auth}DbdHost=localhost\nDbdAddr=127.0.0.1\nDbdPort={self.dbd_port}\nSlurmUser=root\n"
               f"PidFile={self.path('slurmdbd.pid')}\nLogFile={self.path('slurmdbd.log')}\n"
               f"StorageType=accounting_storage/mysql\nStorageHost=127.0.0.1\nStoragePort={self.db_port}\n"
               "StorageUser=root\nStorageLoc=slurm_acct_db\n")
        # slurmdbd reads slurmdbd.conf beside SLURM_CONF's file and refuses one that others can read.
        with open(os.open(self.path("slurmdbd.conf"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as fh:
            fh.write(dbd)
        nodes = "\n".join(f"NodeName={n} NodeAddr={n} Port={free_port()} CPUs={self.cpus} State=UNKNOWN"
                          for n in self.nodes)
        # cred_expire=5 (the least SLURM takes): a requeued job waits it out before it runs again, and the
        # scheduler looks at waiting jobs every 2 s (not 60): a requeued job starts again within seconds.
        conf = f"""ClusterName={CLUSTER}
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={self.ctld_port}
{auth}CredType=cred/munge
SlurmUser=root
SlurmdUser=root
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
SlurmdParameters=config_overrides
SchedulerParameters=sched_interval=2
MailProg=/bin/true
ReturnToService=2
KillWait={self.kill_wait_s}
EnforcePartLimits=ALL
StateSaveLocation={self.path('state')}
SlurmdSpoolDir={self.path('spool')}/%n
SlurmctldPidFile={self.path('slurmctld.pid')}
SlurmdPidFile={self.path('spool')}/%n/slurmd.pid
SlurmctldLogFile={self.path('slurmctld.log')}
SlurmdLogFile={self.path('slurmd')}-%n.log
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort={self.dbd_port}
AccountingStoragePass={self.munge_socket}
AccountingStorageEnforce=associations,limits
JobAcctGatherType=jobacct_gather/none
{nodes}
PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""
        with open(self.conf, "w") as fh:
            fh.write(conf)

    def _associations(self) -> None:
        for command in (["add", "cluster", CLUSTER], ["add", "account", ACCOUNT, f"Cluster={CLUSTER}"],
                        ["add", "user", "root", f"Account={ACCOUNT}", f"Cluster={CLUSTER}"]):
            proc = subprocess.run(["sacctmgr", "-i", *command], env=self._env(), capture_output=True, text=True,
                                  timeout=60)
            said = proc.stdout + proc.stderr
            if proc.returncode != 0 and "Nothing new added" not in said and "already exists" not in said:
                raise RuntimeError(f"sacctmgr {' '.join(command)}: {(proc.stderr or proc.stdout).strip()}")

    def _nodes_idle(self) -> bool:
        states = self._out(["sinfo", "-h", "-N", "-o", "%N %t"]).split("\n")
        return sum(line.endswith(" idle") for line in states) == len(self.nodes)

    # -- helpers
    def _env(self) -> dict[str, str]:
        return {**os.environ, **self.environment()}

    def _ok(self, command: list[str]) -> bool:
        return subprocess.run(command, env=self._env(), capture_output=True, timeout=30).returncode == 0

    def _out(self, command: list[str]) -> str:
        return subprocess.run(command, env=self._env(), capture_output=True, text=True, timeout=30).stdout.strip()

    def _daemon(self, name: str, command: list[str]) -> None:
        log = open(self.path(f"{name.split()[0]}.out"), "ab")
        # A session of its own: Ctrl-C in the terminal reaches this process only, which stops them in order.
        proc = subprocess.Popen(command, env=self._env(), stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        self._procs.append((name, proc))
        with open(self.path("pids"), "a") as fh:
            fh.write(f"{name.split()[0]} {proc.pid}\n")

    def _wait(self, ready, name: str, log: str, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while not ready():
            proc = next(p for n, p in self._procs if n.split()[0] == name)
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = ""
                if os.path.exists(self.path(log)):
                    tail = open(self.path(log), errors="replace").read().strip().splitlines()[-1:]
                    tail = f": {tail[0]}" if tail else ""
                state = f"exited with {proc.returncode}" if proc.poll() is not None else f"not ready in {timeout_s:.0f} s"
                raise RuntimeError(f"local SLURM: {name} {state} (log {self.path(log)}){tail}")
            time.sleep(0.2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default="/tmp/olmocr-slurm", help="state, logs and slurm.conf go here")
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--cpus", type=int, default=None, help="CPUs each node offers (default: this machine's)")
    args = parser.parse_args()
    why = missing()
    if why:
        parser.exit(2, f"error: {why}\n")
    try:
        cluster = LocalSlurm(args.dir, args.nodes, args.cpus).start()
    except (RuntimeError, ValueError, subprocess.CalledProcessError) as exc:
        parser.exit(1, f"error: {exc}\n")
    count = len(cluster.nodes)
    print(f"SLURM_CONF={cluster.conf} SLURM_ACCOUNT={ACCOUNT}  # {count} node{'s' * (count != 1)}, partition "
          f"{PARTITION}; Ctrl-C stops it", flush=True)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    try:
        while not stop:
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    cluster.stop()


if __name__ == "__main__":
    main()
