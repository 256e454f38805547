"""Matrix kind on a real local Ray cluster (ray.cluster_utils.Cluster, several nodes on this host).

Acceptance 1: a matrix of two quick protocols on two nodes, each node with its own custom
resource: every cell ran on its node (recorded node id), every arm of each bracket started on
that node, the matrix verifies, and tampering with one cell's file fails matrix verification
naming that cell. Acceptance 2: killing a node while its cell runs fails that node's cells with
a named reason and still seals (and verifies) the rest. Acceptance 3's other half: the local
executor gives the same cells (same resolved protocols, same files) as the Ray run.
Skipped only when the `ray` extra is absent; the cluster is always shut down.
"""
from __future__ import annotations

import json
import os
import shutil
import threading

import pytest

ray = pytest.importorskip("ray", reason="the `ray` extra is not installed (pip install '.[ray]')")
from ray.cluster_utils import Cluster  # noqa: E402

from dflash_qualify.harness.kinds.matrix.executors import SLOT, RayExecutor  # noqa: E402
from dflash_qualify.harness.kinds.matrix.protocol import MatrixProtocol  # noqa: E402
from dflash_qualify.harness.verify import verify  # noqa: E402

from matrix_helpers import cell_layout, run, write_matrix  # noqa: E402

STORE = 80 << 20   # object store per node: cells return a few hundred KiB
# Quick dead-node detection (a killed raylet is declared dead after a few missed checks); not
# a timing assertion: nothing below depends on how fast it is, only on the outcome.
SYSTEM = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 1000,
          "health_check_timeout_ms": 5000, "health_check_failure_threshold": 5}
WAIT_S = 240       # only stops a hung wait; nothing is timed


@pytest.fixture(scope="module")
def cluster():
    """Head (no CPUs, no cell slot: never a matrix host) + nodes host-a and host-b."""
    c = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "object_store_memory": STORE, "include_dashboard": False,
        "_system_config": SYSTEM})
    try:
        nodes = {name: c.add_node(num_cpus=1, resources={name: 1, SLOT: 1}, labels={"zone": "lab"},
                                  object_store_memory=STORE) for name in ("host-a", "host-b")}
        c.wait_for_nodes()
        ray.init(address=c.address, log_to_driver=False, logging_level="WARNING")
        yield c, nodes
    finally:
        ray.shutdown()
        c.shutdown()


def node_ids_by_resource() -> dict[str, str]:
    return {res: n["NodeID"] for n in ray.nodes() if n["Alive"]
            for res in n["Resources"] if res.startswith("host-")}


@pytest.fixture(scope="module")
def two_node_matrix(cluster, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ray-matrix")
    path = write_matrix(tmp / "in", hosts=["host-a", "host-b"])
    sealed, cells = run(path, tmp / "out", executor="ray")
    return path, sealed, cells, tmp


def test_every_cell_runs_whole_on_its_own_node_and_the_matrix_verifies(two_node_matrix):
    _, outcome, cells, _ = two_node_matrix
    by_res = node_ids_by_resource()
    assert sorted(c["id"] for c in cells) == sorted(
        f"{p}--node-{by_res[h][:12]}" for p in ("exact-bands-quick", "quick-two")
        for h in ("host-a", "host-b"))
    for cell in cells:
        assert cell["status"] == "sealed", cell["reason"]
        assert cell["pinned_node_id"] in by_res.values()
        assert cell["ran_on_node_id"] == cell["pinned_node_id"]      # recorded by the task
        assert set(cell["arms_on_node"]) == {"A", "cand", "B"}
        for arm, seen in cell["arms_on_node"].items():               # bracket never split
            assert seen and all(n == cell["pinned_node_id"] for n in seen), (arm, seen)
        if "OMP_NUM_THREADS" not in os.environ:  # Ray's task default never reaches the arms
            assert cell["ray_env_removed"] == ["OMP_NUM_THREADS"]
            assert "OMP_NUM_THREADS" not in json.loads(
                (outcome.path / cell["dir"] / "environment.json").read_text())["env"]
    nodes = json.loads((outcome.path / "nodes.json").read_text())["nodes"]
    assert sorted(n["ray_node_id"] for n in nodes) == sorted(by_res.values())
    for n in nodes:
        ident = n["identity"]
        assert ident["ray_node_id"] == n["ray_node_id"]
        assert ident["host"] and ident["cpu_model"] is not None and "gpu_driver" in ident
    result = verify(outcome.path)
    assert result.ok, [str(p) for p in result.problems]
    assert result.manifest_sha == outcome.manifest_sha256
    manifest = json.loads((outcome.path / "manifest.json").read_text())
    listed = {e["path"] for e in manifest["files"]}
    for cell in cells:  # the matrix manifest covers each cell's manifest
        assert f"{cell['dir']}/manifest.json" in listed


def test_tampering_with_one_cell_fails_the_matrix_naming_that_cell(two_node_matrix, tmp_path):
    _, outcome, cells, _ = two_node_matrix
    copy = tmp_path / outcome.path.name
    shutil.copytree(outcome.path, copy)
    victim, other = cells[1], cells[0]
    stats = copy / victim["dir"] / "stats.json"
    stats.write_text(stats.read_text().replace('"qualified": ', '"qualified":  ', 1))
    result = verify(copy)
    assert not result.ok
    text = "\n".join(str(p) for p in result.problems)
    assert f"{victim['dir']}/stats.json: modified" in text and other["id"] not in text


def test_local_executor_gives_the_same_cells_on_one_host(two_node_matrix):
    path, ray_outcome, ray_records, tmp = two_node_matrix
    local, local_cells = run(path, tmp / "local", executor="local")
    assert verify(local.path).ok
    ray_cells = {c["protocol"]: c for c in ray_records}
    assert sorted(c["protocol"] for c in local_cells) == sorted(ray_cells)
    for cell in local_cells:
        twin = ray_cells[cell["protocol"]]
        here, there = local.path / cell["dir"], ray_outcome.path / twin["dir"]
        assert cell_layout(here) == cell_layout(there)
        assert json.loads((here / "protocol.json").read_text()) == \
            json.loads((there / "protocol.json").read_text())


def test_hosts_select_by_label_or_resource_and_name_each_gap(cluster, tmp_path):
    matrix = MatrixProtocol.from_toml(write_matrix(tmp_path, hosts=["zone=lab", "gpu-none"]))
    executor = RayExecutor()
    try:
        selection = executor.select(matrix)
    finally:
        executor.close()
    by_res = node_ids_by_resource()
    assert sorted(n.node_id for n in selection.nodes) == sorted(
        by_res[h] for h in ("host-a", "host-b"))
    assert [(g.name, g.reason) for g in selection.gaps] == [
        ("hosts-gpu-none", "no alive Ray node matches hosts entry 'gpu-none'")]
    only_b = executor.select(MatrixProtocol.from_toml(write_matrix(tmp_path, hosts=["host-b"])))
    assert [n.node_id for n in only_b.nodes] == [by_res["host-b"]]


def test_killing_a_node_mid_matrix_fails_its_cells_and_seals_the_rest(cluster, tmp_path):
    c, nodes = cluster
    victim = c.add_node(num_cpus=1, resources={"host-c": 1, SLOT: 1}, object_store_memory=STORE)
    c.wait_for_nodes()
    victim_id = node_ids_by_resource()["host-c"]
    killed = threading.Event()

    def on_event(name, details):
        # The victim dies the moment its first cell is submitted, inside the driver's loop: the
        # cell cannot finish first (an earlier form waited to see an arm's worker and lost that
        # race under load), and its second cell is then due on a dead node.
        if name == "cell_start" and details.get("node_id") == victim_id and not killed.is_set():
            c.remove_node(victim, allow_graceful=False)
            killed.set()

    outcome, cells = run(write_matrix(tmp_path / "in", name="kill", hosts=["host-a", "host-c"],
                                      measured=6), tmp_path / "out", executor="ray",
                         on_event=on_event)
    assert killed.wait(WAIT_S)
    victim_name = f"node-{victim_id[:12]}"
    lost = [cell for cell in cells if cell["node"] == victim_name]
    kept = [cell for cell in cells if cell["node"] != victim_name]
    assert len(lost) == 2 and len(kept) == 2
    for cell in lost:
        assert cell["status"] == "failed"
        assert cell["reason"].startswith(f"node {victim_name} lost: "), cell["reason"]
    for cell in kept:
        assert cell["status"] == "sealed", cell["reason"]
    assert not outcome.path.name.endswith(".partial")
    result = verify(outcome.path)
    assert result.ok, [str(p) for p in result.problems]
    report = (outcome.path / "report.md").read_text()
    assert report.count("| FAILED |") == 2 and f"{lost[0]['id']}: node {victim_name} lost" in report
    node_record = {n["name"]: n for n in json.loads((outcome.path / "nodes.json").read_text())["nodes"]}
    assert node_record[victim_name]["lost"] is True


def test_a_cuda_protocol_on_a_node_without_gpu_fails_its_cell_with_the_reason(cluster, tmp_path):
    (tmp_path / "m.toml").write_text(
        'schema_version = 1\nkind = "matrix"\nname = "gpu-gap"\n'
        'protocols = ["exact-bands-gpu-aba"]\nhosts = ["host-a"]\n', encoding="utf-8")
    outcome, [cell] = run(tmp_path / "m.toml", tmp_path / "out", executor="ray")
    assert cell["status"] == "failed"
    assert "runs on cuda but node" in cell["reason"] and "has no GPU" in cell["reason"]
    assert verify(outcome.path).ok
