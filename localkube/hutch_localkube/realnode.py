"""One real node for the plane's ``node`` tier: containerd, a CNI bridge, a kubelet and DNS.

Why: kwok Pods run nothing, so Hutch's image, probes, cgroup limits and volumes were never tested
(issue 12, docs/real-node.md). This module holds what a real node needs beyond the
``workloads`` tier: host-side setup (bridge, cgroup root, forward-drop rule), config files for
containerd and kubelet, and a teardown that leaves no process, mount, cgroup, bridge or rule
behind. Everything it creates is recorded in ``$RUN/node.json`` first, so a stale run (owner
killed) is cleaned up by the same code (``cleanup``). Operator notes: docs/real-node.md.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import signal
import socket
import struct
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("hutch.k8s.node")

# The node's network, written once here: nothing on the machine uses 10.246/16 (uplink is
# 192.0.2.0/24, Services 10.0.0.0/24, kwok's fake Pod IPs 10.244.0.0/16).
NODE_NAME = "hutch-node"
BRIDGE = "hutchbr0"
POD_CIDR = "10.246.0.0/24"
SERVICE_CIDR = "10.0.0.0/24"  # the apiserver's --service-cluster-ip-range; routed onto the bridge
NODE_IP = "10.246.0.1"  # the bridge's address: kubelet serves here, Pods route through it
CNI_NETWORK = "hutch-node"
CNI_BIN_DIR = Path("/usr/lib/cni")  # Debian's containernetworking-plugins
CNI_CACHE = Path("/var/lib/cni/results")  # libcni's result cache (not configurable in 1.6)
CONTAINERD = Path("/usr/bin/containerd")
CTR = Path("/usr/bin/ctr")
SHIM_SOCKET_DIR = Path("/run/containerd/s")  # containerd 1.6 puts shim sockets here, always
CGROUP_ROOT = Path("/sys/fs/cgroup")
PAUSE_IMAGE = "localhost/hutch/pause:3.10"
FAKE_NODE_TAINT = {"key": "hutch.dev/fake-node", "value": "kwok", "effect": "NoSchedule"}
# One bridge per machine, so one node plane: every checkout and user takes this same lock.
LOCK_PATH = Path("/tmp/hutch-node.lock")  # noqa: S108
# How long a second plane waits for the node; developers sharing one machine raise it.
LOCK_WAIT_SECONDS = float(os.environ.get("HUTCH_NODE_LOCK_WAIT", "300"))
# kubelet sets these at start (container_manager_linux.setupKernelTunables); we put them back.
KUBELET_SYSCTLS = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
    "net/ipv4/ip_forward",  # the bridge plugin turns forwarding on (isGateway)
    "net/ipv4/conf/all/route_localnet",  # kube-proxy, for NodePorts on localhost
    "net/netfilter/nf_conntrack_tcp_be_liberal",  # kube-proxy, conntrack.tcpBeLiberal
)
# Paths kubelet creates whatever its config says (device-plugin socket dir, the flexvolume dir it
# probes before reading volumePluginDir, the /var/log/containers symlinks to podLogsDir).
KUBELET_HOST_PATHS = ("/var/lib/kubelet", "/usr/libexec/kubernetes", "/var/log/containers")
CONTAINER_LOG_LINKS = Path("/var/log/containers")
# kubelet's iptables chains (kubelet_network_linux.go), created through iptables-nft.
KUBELET_CHAINS = frozenset({"KUBE-FIREWALL", "KUBE-KUBELET-CANARY", "KUBE-IPTABLES-HINT"})
KUBE_PROXY_TABLES = (("ip", "kube-proxy"), ("ip6", "kube-proxy"))  # its nftables mode's tables
FORWARD_DROP = ("FORWARD", "-i", BRIDGE, "!", "-o", BRIDGE, "-j", "DROP")
# Cluster DNS: CoreDNS (our wrapper build, localkube/gobuild/coredns/main.go) as a host process on
# the bridge address, so Pods reach it directly and nothing listens on the machine's own :53.
CLUSTER_DOMAIN = "cluster.local"
DNS_IP = NODE_IP
DNS_PORT = 53
COREDNS_USER = "system:coredns"  # its client cert's CN; RBAC as kubeadm's system:coredns


class NodeBusyError(RuntimeError):
    """Another node plane holds the machine's bridge; two cannot share 10.246.0.0/24."""


@dataclass
class NodeState:
    """What the node created on the host, saved before creating it: the cleanup's to-do list."""

    run_dir: str
    cgroup_name: str
    containerd_socket: str
    sysctls: dict[str, str]
    made_shim_dir: bool = False  # /run/containerd did not exist before us
    bridge_created: bool = False
    rule_added: bool = False
    proxy_started: bool = False  # kube-proxy's nft tables are ours to delete
    nft_tables: list[str] = field(default_factory=list)  # "family name" before the run
    kubelet_chains: list[str] = field(default_factory=list)  # kubelet chains before the run
    absent_paths: list[str] = field(default_factory=list)  # KUBELET_HOST_PATHS not there before

    def save(self) -> None:
        """Written after every host change, so a SIGKILLed owner still leaves an exact list."""
        Path(self.run_dir, "node.json").write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls, run_dir: Path) -> NodeState | None:
        """The state of a run, or None if it never got as far as touching the host."""
        try:
            return cls(**json.loads((run_dir / "node.json").read_text()))
        except (FileNotFoundError, ValueError, TypeError):
            return None


@dataclass(frozen=True)
class NodeLayout:
    """Paths and ports of one node, all under the plane's run dir."""

    run_dir: Path
    kubelet_port: int
    healthz_port: int

    @property
    def cgroup_name(self) -> str:
        """kubelet's cgroupRoot (in every v1 hierarchy): one per run, never the machine's."""
        return f"hutch-node-{self.run_dir.name}"

    @property
    def containerd_dir(self) -> Path:
        return self.run_dir / "containerd"

    @property
    def containerd_socket(self) -> Path:
        return self.containerd_dir / "containerd.sock"

    @property
    def kubelet_dir(self) -> Path:
        return self.run_dir / "kubelet"

    @property
    def pod_logs(self) -> Path:
        return self.run_dir / "pod-logs"

    @property
    def resolv_conf(self) -> Path:
        """kubelet's ``resolvConf``: the node's resolver as Pods see it (the cluster DNS)."""
        return self.run_dir / "resolv.conf"

    @property
    def volumes_dir(self) -> Path:
        """Where local PVs live (``make_local_pvs``): on the node's disk, under the run."""
        return self.run_dir / "volumes"


# --- host setup ------------------------------------------------------------------------------


def acquire_lock(timeout: float = LOCK_WAIT_SECONDS) -> int:
    """An exclusive flock held for the plane's life (the fd closes with the process).

    A second test run on the machine waits for the first one's node rather than failing.
    """
    fd = os.open(LOCK_PATH, os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + timeout
    warned = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() > deadline:
                os.close(fd)
                raise NodeBusyError(f"another node plane held {LOCK_PATH} for {timeout}s") from None
            if not warned:
                log.warning("another node plane holds %s; waiting", LOCK_PATH)
                warned = True
            time.sleep(1)


def release_lock(fd: int) -> None:
    """Closing the descriptor drops the flock."""
    with contextlib.suppress(OSError):
        os.close(fd)


def read_sysctls() -> dict[str, str]:
    """The values kubelet, kube-proxy and the bridge plugin may change, to restore on cleanup."""
    values = {}
    for key in KUBELET_SYSCTLS:
        with contextlib.suppress(FileNotFoundError):
            values[key] = Path("/proc/sys", key).read_text().strip()
    return values


def cgroup_hierarchies(unified: bool = False) -> list[Path]:
    """The cgroup v1 hierarchies; with ``unified``, also the hybrid setup's cgroup2 mount,
    where runc mirrors every container's cgroup (so teardown must look there too)."""
    return sorted(
        p for p in CGROUP_ROOT.iterdir() if p.is_dir() and (unified or p.name != "unified")
    )


def make_cgroup_root(name: str) -> None:
    """kubelet's ``cgroupRoot``: our own subtree, so Pods never land in the machine's root."""
    for hierarchy in cgroup_hierarchies():
        path = hierarchy / name
        path.mkdir(exist_ok=True)
        if hierarchy.name == "cpuset":  # a new cpuset starts empty and would accept no task
            for knob in ("cpuset.cpus", "cpuset.mems"):
                (path / knob).write_text((hierarchy / knob).read_text())


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """iproute2, with its error in the exception."""
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def make_bridge() -> None:
    """The Pod bridge exists before kubelet, whose node IP must be a local address."""
    ip("link", "add", BRIDGE, "type", "bridge")
    ip("addr", "add", f"{NODE_IP}/{POD_CIDR.split('/')[1]}", "dev", BRIDGE)
    ip("link", "set", BRIDGE, "up")
    # ClusterIPs route onto the bridge: kube-proxy DNATs them to a Pod there, and a ClusterIP it
    # has no rule for dies on the bridge instead of following the default route off the machine.
    ip("route", "add", SERVICE_CIDR, "dev", BRIDGE, "src", NODE_IP)


def add_forward_drop() -> None:
    """Nothing from the bridge is forwarded anywhere else: the env rule, enforced on the host."""
    subprocess.run(["iptables", "-I", *FORWARD_DROP], check=True, capture_output=True)


def prepare_host(layout: NodeLayout) -> NodeState:
    """Records, then makes, the host-side pieces: cgroup root, bridge and forward-drop rule."""
    state = NodeState(
        run_dir=str(layout.run_dir),
        cgroup_name=layout.cgroup_name,
        containerd_socket=str(layout.containerd_socket),
        sysctls=read_sysctls(),
        made_shim_dir=not SHIM_SOCKET_DIR.parent.exists(),
        nft_tables=nft_tables(),
        kubelet_chains=sorted(kubelet_chains()),
        absent_paths=[p for p in KUBELET_HOST_PATHS if not Path(p).exists()],
    )
    state.save()
    make_cgroup_root(state.cgroup_name)
    if ip("link", "show", BRIDGE, check=False).returncode == 0:
        raise NodeBusyError(f"bridge {BRIDGE} exists already (a run killed before cleanup?)")
    state.bridge_created = True
    state.save()
    make_bridge()
    state.rule_added = True
    state.save()
    add_forward_drop()
    return state


# --- config files ------------------------------------------------------------------------------


def containerd_config(layout: NodeLayout, root: Path) -> str:
    """containerd 1.6 config: private state and socket, ``root`` (the image store kept between
    runs, ``imagestore``), our CNI dir, no oom_score_adj < 0.

    ``restrict_oom_score_adj``: this sandbox's root lacks CAP_SYS_RESOURCE, so runc cannot give
    the sandbox its -998 score and every Pod failed with ``can't get final child's PID``.
    ``netns_mounts_under_state_dir`` keeps the Pods' netns bind mounts under the run dir.
    """
    d = layout.containerd_dir
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{root}"
state = "{d / "state"}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{layout.containerd_socket}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{d / "opt"}"

[{cri}]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  [{cri}.cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{layout.run_dir / "cni"}"
  [{cri}.containerd]
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        Root = "{d / "runc"}"
        SystemdCgroup = false
"""


def cni_conflist(layout: NodeLayout) -> str:
    """bridge + host-local on POD_CIDR, gateway on the bridge, no masquerade, IPAM under the run."""
    ipam = {
        "type": "host-local",
        "ranges": [[{"subnet": POD_CIDR, "gateway": NODE_IP}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": str(layout.run_dir / "cni-ipam"),
    }
    bridge = {
        "type": "bridge",
        "bridge": BRIDGE,
        "isGateway": True,
        "ipMasq": False,
        "hairpinMode": True,
        "ipam": ipam,
    }
    return json.dumps({"cniVersion": "0.4.0", "name": CNI_NETWORK, "plugins": [bridge]}, indent=1)


def kubelet_config(layout: NodeLayout, pki: Path, cgroup_name: str) -> str:
    """KubeletConfiguration for cgroup v1 (failCgroupV1: false), cgroupfs, own ports and dirs."""
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": f"/{cgroup_name}",
        "containerRuntimeEndpoint": f"unix://{layout.containerd_socket}",
        "address": NODE_IP,
        "port": layout.kubelet_port,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": layout.healthz_port,
        "readOnlyPort": 0,
        "tlsCertFile": str(pki / "kubelet-serving.crt"),
        "tlsPrivateKeyFile": str(pki / "kubelet-serving.key"),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(pki / "ca.crt")},
        },
        "authorization": {"mode": "Webhook"},
        "podLogsDir": str(layout.pod_logs),
        "volumePluginDir": str(layout.kubelet_dir / "volume-plugins"),
        "staticPodPath": "",
        "maxPods": 30,
        # ClusterFirst Pods get `nameserver 10.246.0.1` and the cluster's search list. The
        # machine's /etc/resolv.conf is not used: its nameserver is off the machine (a Pod's
        # query to it would be dropped by FORWARD_DROP after a 5 s timeout per try) and its
        # search domains would be appended to every Pod's.
        "clusterDNS": [DNS_IP],
        "clusterDomain": CLUSTER_DOMAIN,
        "resolvConf": str(layout.resolv_conf),
        # Our images are imported, never pulled: image GC must not remove them.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "2%"},
        "registerNode": True,
    }
    return json.dumps(config, indent=1)


def kube_proxy_config(kubeconfig: Path, healthz_port: int, metrics_port: int) -> str:
    """kube-proxy in nftables mode: its rules live in its own ``kube-proxy`` tables, which
    teardown deletes whole. Conntrack table sizes and timeouts are left alone (0 = do not touch).

    ``tcpBeLiberal``: the nftables proxier, unlike the iptables one, installs no DROP rule for
    conntrack-INVALID packets. A Pod's reply that conntrack judges out of window (a zero-window
    probe's answer while the broker has stopped reading a blocked publisher) then skips the
    reverse DNAT, reaches the host from the Pod IP, matches no socket, and the host's RST kills
    the broker's end: the publisher saw "connection reset by peer" through the ClusterIP.
    Liberal window tracking (what kube-proxy sets with this option) never marks them INVALID.
    """
    zero = "0s"
    config = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "nftables",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": NODE_NAME,
        "clusterCIDR": POD_CIDR,
        "detectLocalMode": "ClusterCIDR",
        "healthzBindAddress": f"127.0.0.1:{healthz_port}",
        "metricsBindAddress": f"127.0.0.1:{metrics_port}",
        "nodePortAddresses": [f"{NODE_IP}/32"],  # NodePorts on the bridge address only
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": zero,
            "tcpCloseWaitTimeout": zero,
            "tcpBeLiberal": True,
        },
    }
    return json.dumps(config, indent=1)


def resolv_conf() -> str:
    """The node's resolv.conf for kubelet: the cluster DNS only, no search domains."""
    return f"nameserver {DNS_IP}\n"


def service_cidr_zone(cidr: str) -> str:
    """A /24 (or /16, /8) as its reverse zone: 10.0.0.0/24 -> 0.0.10.in-addr.arpa."""
    address, bits = cidr.split("/")
    octets = address.split(".")[: int(bits) // 8]
    return ".".join(reversed(octets)) + ".in-addr.arpa"


def dns_zones() -> list[str]:
    """What CoreDNS is authoritative for: the cluster domain, and reverse zones of the Service
    and Pod CIDRs. Everything else is answered REFUSED (there is no upstream to forward to)."""
    return [CLUSTER_DOMAIN, service_cidr_zone(SERVICE_CIDR), service_cidr_zone(POD_CIDR)]


def corefile(kubeconfig: Path, health_port: int, ready_port: int) -> str:
    """CoreDNS's config: kubeadm's default Corefile without `forward`, `cache` and `loop`.

    - one server block for the cluster's zones, bound to the bridge address only (UDP and TCP);
      a query for any other name matches no block and the server answers REFUSED at once;
    - no `cache`: answers come from the informers' memory anyway, and a cache would serve a
      restarted StatefulSet Pod's old IP (or a just-created Service's NXDOMAIN) for its TTL;
    - `log` writes every query with its rcode to logs/coredns.log (the tests' evidence);
    - health and ready on loopback ports of their own.
    """
    zones = " ".join(f"{zone}:{DNS_PORT}" for zone in dns_zones())
    return f"""{zones} {{
    bind {DNS_IP}
    errors
    log
    health 127.0.0.1:{health_port}
    ready 127.0.0.1:{ready_port}
    kubernetes {{
        kubeconfig {kubeconfig}
        pods insecure
        ttl 5
    }}
    loadbalance
}}
"""


def coredns_rbac() -> list[tuple[str, dict[str, Any]]]:
    """kubeadm's ``system:coredns`` ClusterRole (minus pods: `pods insecure` watches none),
    bound to CoreDNS's certificate user instead of a ServiceAccount. (path, object) pairs."""
    meta = {"name": COREDNS_USER, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"}}
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": meta,
        "rules": [
            {
                "apiGroups": [""],
                "resources": ["services", "namespaces"],
                "verbs": ["list", "watch"],
            },
            {
                "apiGroups": ["discovery.k8s.io"],
                "resources": ["endpointslices"],
                "verbs": ["list", "watch"],
            },
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": meta,
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": COREDNS_USER,
        },
        "subjects": [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": COREDNS_USER}
        ],
    }
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    return [(f"{rbac}/clusterroles", role), (f"{rbac}/clusterrolebindings", binding)]


@dataclass(frozen=True)
class DnsReply:
    """What a DNS server said: the rcode (0 NOERROR, 3 NXDOMAIN, 5 REFUSED) and the A/PTR data."""

    rcode: int
    answers: list[str]


RCODES = {0: "NOERROR", 2: "SERVFAIL", 3: "NXDOMAIN", 5: "REFUSED"}
_QTYPES = {"A": 1, "PTR": 12}


def dns_query(
    name: str, qtype: str = "A", server: str = DNS_IP, tcp: bool = False, timeout: float = 2.0
) -> DnsReply:
    """One query, UDP or TCP, without a resolver library: the harness's readiness probe and the
    tests' view from the host. Answers are A records as dotted quads, PTR records as names."""
    query_id = int.from_bytes(os.urandom(2), "big")
    question = b"".join(
        bytes([len(label)]) + label.encode() for label in name.rstrip(".").split(".")
    )
    packet = struct.pack(">HHHHHH", query_id, 0x0100, 1, 0, 0, 0)
    packet += question + b"\0" + struct.pack(">HH", _QTYPES[qtype], 1)
    kind = socket.SOCK_STREAM if tcp else socket.SOCK_DGRAM
    with socket.socket(socket.AF_INET, kind) as sock:
        sock.settimeout(timeout)
        sock.connect((server, DNS_PORT))
        if tcp:
            sock.sendall(struct.pack(">H", len(packet)) + packet)
            reply = _recv_exact(sock, struct.unpack(">H", _recv_exact(sock, 2))[0])
        else:
            sock.send(packet)
            reply = sock.recv(4096)
    reply_id, flags, qdcount, ancount = struct.unpack(">HHHH", reply[:8])
    if reply_id != query_id:
        raise OSError(f"DNS reply id {reply_id} for query {query_id}")
    offset = 12
    for _ in range(qdcount):
        offset = _skip_name(reply, offset) + 4
    answers = []
    for _ in range(ancount):
        offset = _skip_name(reply, offset)
        rtype, _cls, _ttl, length = struct.unpack(">HHIH", reply[offset : offset + 10])
        offset += 10
        if rtype == 1:
            answers.append(socket.inet_ntoa(reply[offset : offset + length]))
        elif rtype == 12:
            answers.append(_read_name(reply, offset))
        offset += length
    return DnsReply(flags & 0xF, answers)


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise OSError("DNS server closed the TCP connection")
        data += chunk
    return data


def _skip_name(msg: bytes, offset: int) -> int:
    """The offset after a (possibly compressed) name."""
    while msg[offset]:
        if msg[offset] & 0xC0 == 0xC0:
            return offset + 2
        offset += msg[offset] + 1
    return offset + 1


def _read_name(msg: bytes, offset: int) -> str:
    """A (possibly compressed) name as text."""
    labels = []
    while msg[offset]:
        if msg[offset] & 0xC0 == 0xC0:
            offset = struct.unpack(">H", msg[offset : offset + 2])[0] & 0x3FFF
            continue
        labels.append(msg[offset + 1 : offset + 1 + msg[offset]].decode())
        offset += msg[offset] + 1
    return ".".join(labels) + "."


def delete_kube_proxy_tables() -> None:
    """kube-proxy's nftables state: two tables, nothing else."""
    for family, table in KUBE_PROXY_TABLES:
        subprocess.run(["nft", "delete", "table", family, table], capture_output=True, check=False)


def kube_proxy_tables() -> list[str]:
    """Which of kube-proxy's tables exist (for the leak check)."""
    found = []
    for family, table in KUBE_PROXY_TABLES:
        command = ["nft", "list", "table", family, table]
        listed = subprocess.run(command, capture_output=True, check=False)
        if listed.returncode == 0:
            found.append(f"nft table {family} {table}")
    return found


def _nft(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["nft", *args], capture_output=True, text=True, check=False)


def nft_tables() -> list[str]:
    """Every nftables table on the machine, as "family name"."""
    lines = _nft("list", "tables").stdout.splitlines()
    return [ln.removeprefix("table ").strip() for ln in lines if ln.startswith("table ")]


def _table_items(table: str) -> list[dict[str, Any]]:
    """The chains and rules of one table (nft's JSON), each as {"chain": ...} or {"rule": ...}."""
    listed = _nft("-j", "list", "table", *table.split())
    if listed.returncode != 0:
        return []
    items: list[dict[str, Any]] = json.loads(listed.stdout)["nftables"]
    return [item for item in items if "chain" in item or "rule" in item]


def kubelet_chains() -> set[str]:
    """kubelet's chains present now, as "family table chain"."""
    found = set()
    for table in nft_tables():
        for item in _table_items(table):
            if "chain" in item and item["chain"]["name"] in KUBELET_CHAINS:
                found.add(f"{table} {item['chain']['name']}")
    return found


def remove_kubelet_chains(before: list[str], tables_before: list[str]) -> None:
    """Deletes the chains kubelet added (and the rules jumping to them), then any table that
    did not exist before the run and is now empty."""
    for table in nft_tables():
        items = _table_items(table)
        ours = {
            item["chain"]["name"]
            for item in items
            if "chain" in item
            and item["chain"]["name"] in KUBELET_CHAINS
            and f"{table} {item['chain']['name']}" not in before
        }
        for item in items:
            rule = item.get("rule")
            if rule and (rule["chain"] in ours or _jumps_to(rule, ours)):
                _nft("delete", "rule", *table.split(), rule["chain"], "handle", str(rule["handle"]))
        for chain in ours:
            _nft("delete", "chain", *table.split(), chain)
        if table not in tables_before and not any("rule" in i for i in _table_items(table)):
            _nft("delete", "table", *table.split())


def _jumps_to(rule: dict[str, Any], chains: set[str]) -> bool:
    """True if an nft rule (JSON) jumps or goes to one of ``chains``."""
    text = json.dumps(rule.get("expr", []))
    return any(f'"target": "{chain}"' in text for chain in chains)


def kubelet_args(layout: NodeLayout, config: Path, kubeconfig: Path) -> list[str]:
    """Flags that have no config-file field (or must not default to /var/lib/kubelet)."""
    return [
        f"--config={config}",
        f"--kubeconfig={kubeconfig}",
        f"--root-dir={layout.kubelet_dir}",
        f"--cert-dir={layout.kubelet_dir / 'pki'}",
        f"--hostname-override={NODE_NAME}",
        f"--node-ip={NODE_IP}",
        "--v=1",
    ]


# --- teardown (also for stale runs) -------------------------------------------------------------


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return raw.decode(errors="replace").split("\0")


def _flag(args: list[str], name: str) -> str:
    """The value after ``name`` in an argv, or ""."""
    with contextlib.suppress(ValueError, IndexError):
        return args[args.index(name) + 1]
    return ""


def our_shims(socket: str) -> list[tuple[int, Path]]:
    """Shim PIDs started by *our* containerd (``-address <our socket>``) and their sockets.

    containerd 1.6 names a shim's socket ``/run/containerd/s/sha256(address/ns/id)``.
    """
    shims = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        args = _cmdline(int(entry.name))
        if not args or not args[0].endswith("containerd-shim-runc-v2"):
            continue
        if _flag(args, "-address") != socket:
            continue
        key = f"{socket}/{_flag(args, '-namespace')}/{_flag(args, '-id')}"
        digest = hashlib.sha256(key.encode()).hexdigest()
        shims.append((int(entry.name), SHIM_SOCKET_DIR / digest))
    return shims


def _cgroup_dirs(name: str) -> list[Path]:
    """Every cgroup under our root, deepest first (the order rmdir needs)."""
    dirs: list[Path] = []
    for hierarchy in cgroup_hierarchies(unified=True):
        top = hierarchy / name
        if top.is_dir():
            dirs.extend(p for p in top.rglob("*") if p.is_dir())
            dirs.append(top)
    return sorted(dirs, key=lambda p: len(p.parts), reverse=True)


def kill_cgroup_tasks(name: str) -> None:
    """SIGKILLs every process in our cgroup subtree (containers and pause) until it is empty."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        pids: set[int] = set()
        for path in _cgroup_dirs(name):
            with contextlib.suppress(OSError):
                pids.update(int(p) for p in (path / "cgroup.procs").read_text().split())
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
    log.warning("processes left in cgroup %s after 10 s", name)


def remove_cgroups(name: str) -> None:
    """rmdir bottom-up; a cgroup with no tasks left goes at once."""
    for path in _cgroup_dirs(name):
        with contextlib.suppress(OSError):
            path.rmdir()


def kill_shims(socket: str) -> None:
    """SIGKILLs our shims (by their ``-address``) and removes the sockets they leave."""
    for pid, sock in our_shims(socket):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(FileNotFoundError):
            sock.unlink()


def mounts_under(root: Path) -> list[str]:
    """Mount points at or under ``root`` in our mount namespace, newest first."""
    points = []
    prefix = str(root)
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].encode().decode("unicode_escape")  # \040 and friends
        if point == prefix or point.startswith(prefix + "/"):
            points.append(point)
    return points[::-1]


def unmount_all(root: Path) -> None:
    """Lazily unmounts everything under the run dir: kubelet volumes, netns, overlay rootfs."""
    for _ in range(5):
        points = mounts_under(root)
        if not points:
            return
        for point in points:
            subprocess.run(["umount", "-l", point], capture_output=True, check=False)
    log.warning("mounts left under %s: %s", root, mounts_under(root))


def remove_cni_cache() -> None:
    """libcni caches each attachment as /var/lib/cni/results/<network>-<sandbox id>-<if>: ours,
    and containerd's loopback attachment of the same sandboxes (``cni-loopback-<id>-lo``)."""
    if not CNI_CACHE.is_dir():
        return
    for path in CNI_CACHE.glob(f"{CNI_NETWORK}-*"):
        sandbox_id = path.name.removeprefix(f"{CNI_NETWORK}-").rsplit("-", 1)[0]
        (CNI_CACHE / f"cni-loopback-{sandbox_id}-lo").unlink(missing_ok=True)
        path.unlink(missing_ok=True)


def remove_shim_dir() -> None:
    """containerd 1.6 makes /run/containerd/s whatever its config says; drop it if empty."""
    for path in (SHIM_SOCKET_DIR, SHIM_SOCKET_DIR.parent):
        with contextlib.suppress(OSError):
            path.rmdir()


def our_log_links(run_dir: Path) -> list[Path]:
    """kubelet's /var/log/containers symlinks that point into this run's podLogsDir."""
    if not CONTAINER_LOG_LINKS.is_dir():
        return []
    prefix = f"{run_dir}/"
    return [
        link
        for link in CONTAINER_LOG_LINKS.iterdir()
        if link.is_symlink() and os.readlink(link).startswith(prefix)
    ]


def remove_kubelet_paths(run_dir: Path, absent_before: list[str]) -> None:
    """Our log symlinks, then the host paths kubelet created because they were absent."""
    for link in our_log_links(run_dir):
        link.unlink(missing_ok=True)
    for path in map(Path, absent_before):
        if path.exists() and not mounts_under(path):
            shutil.rmtree(path, ignore_errors=True)


def restore_sysctls(values: dict[str, str]) -> None:
    """Puts back what kubelet and the bridge plugin changed (ip_forward included)."""
    for key, value in values.items():
        with contextlib.suppress(OSError):
            Path("/proc/sys", key).write_text(value)


def cleanup(run_dir: Path) -> None:
    """Removes the node's traces on the host; idempotent, driven by ``node.json``.

    Runs after kubelet and containerd were stopped (or died with their owner). Order matters:
    processes first (they pin mounts and netns), then mounts, then cgroups and the network.
    """
    state = NodeState.load(run_dir)
    if state is None:
        return
    kill_cgroup_tasks(state.cgroup_name)
    kill_shims(state.containerd_socket)
    unmount_all(run_dir)
    remove_cgroups(state.cgroup_name)
    if state.proxy_started:
        delete_kube_proxy_tables()
    remove_kubelet_chains(state.kubelet_chains, state.nft_tables)
    if state.rule_added:
        subprocess.run(["iptables", "-D", *FORWARD_DROP], capture_output=True, check=False)
    if state.bridge_created:
        ip("link", "del", BRIDGE, check=False)
    remove_cni_cache()
    remove_kubelet_paths(run_dir, state.absent_paths)
    if state.made_shim_dir:
        remove_shim_dir()
    restore_sysctls(state.sysctls)
    (run_dir / "node.json").unlink(missing_ok=True)


def leftovers(run_dir: Path, socket: str, cgroup_name: str, state: NodeState | None) -> list[str]:
    """What a clean teardown must not leave: for tests and the teardown's own check.

    Without ``state`` this run never touched the host (it was still waiting for the node lock),
    so the machine-wide pieces (bridge, CNI cache, nft tables) belong to another run: only what
    is keyed by this run is checked.
    """
    found = [f"mount {p}" for p in mounts_under(run_dir)]
    found += [f"shim pid {pid}" for pid, _ in our_shims(socket)]
    found += [f"cgroup {p}" for p in _cgroup_dirs(cgroup_name)]
    found += [f"log link {link}" for link in our_log_links(run_dir)]
    if state is None:
        return found
    if ip("link", "show", BRIDGE, check=False).returncode == 0:
        found.append(f"bridge {BRIDGE}")
    if CNI_CACHE.is_dir():
        found += [f"CNI cache {p}" for p in CNI_CACHE.glob(f"{CNI_NETWORK}-*")]
    found += [f"host path {p}" for p in state.absent_paths if Path(p).exists()]
    found += leftover_chains(state.kubelet_chains)
    return found + kube_proxy_tables()


def leftover_chains(before: list[str]) -> list[str]:
    """kubelet chains that were not there before the run."""
    return [f"chain {c}" for c in sorted(kubelet_chains() - set(before))]


def local_pv(name: str, path: Path, size: str) -> dict[str, object]:
    """A ``local`` PV pinned to the real node: kubelet bind-mounts it and applies fsGroup."""
    selector = {"key": "kubernetes.io/hostname", "operator": "In", "values": [NODE_NAME]}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "hutch-test",
            "local": {"path": str(path)},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [selector]}]}},
        },
    }
