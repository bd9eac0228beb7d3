"""Cluster (3 masters) and Sentinel failover, real servers."""

import os
import subprocess
import time

import pytest
import redis
from redis.cluster import RedisCluster
from redis.sentinel import Sentinel

from redis_lock_client import CommandError, Session

from conftest import SERVER, Server, free_port, info, wait_for


def _cluster_node(timeout_ms):
    bus = free_port()
    node = Server(args=["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                        "--cluster-node-timeout", str(timeout_ms), "--cluster-port", str(bus)]).start()
    node.bus = bus
    return node


def _start_cluster(n=3, timeout_ms=5000, replicas=0):
    nodes = []
    for _ in range(n + replicas):
        nodes.append(_cluster_node(timeout_ms))
    masters, extra = nodes[:n], nodes[n:]
    per = 16384 // n
    for i, node in enumerate(masters):
        c = node.client()
        c.execute_command("CLUSTER", "SET-CONFIG-EPOCH", i + 1)
        last = 16383 if i == n - 1 else (i + 1) * per - 1
        c.execute_command("CLUSTER", "ADDSLOTSRANGE", i * per, last)
    for node in nodes[1:]:
        node.client().execute_command("CLUSTER", "MEET", "127.0.0.1", nodes[0].port, nodes[0].bus)

    def settled():
        for node in nodes:
            c = node.client(decode_responses=True)
            if "cluster_state:ok" not in c.execute_command("CLUSTER", "INFO"):
                return False
            nodes_txt = c.execute_command("CLUSTER", "NODES")
            if len(nodes_txt.strip().splitlines()) != n + replicas or "handshake" in nodes_txt or "fail" in nodes_txt:
                return False
        return True

    wait_for("cluster settled", settled, timeout=20, interval=0.05)
    return nodes


@pytest.fixture(scope="module")
def cluster():
    nodes = []
    try:
        nodes = _start_cluster()
        yield nodes
    finally:
        for n in nodes:
            n.cleanup()


def _node_client(cluster, rc, key):
    port = rc.get_node_from_key(key).port
    return next(n for n in cluster if n.port == port).client()


def test_cluster_locks_on_three_nodes_and_a_multilock(cluster):
    rc = RedisCluster(host="127.0.0.1", port=cluster[0].port)
    try:
        keys, ports = [], set()
        for i in range(100):
            k = f"k{i}"
            p = rc.get_node_from_key(k).port
            if p not in ports:
                ports.add(p)
                keys.append(k)
        assert len(keys) == 3
        with Session(rc, lease_ms=2000) as session:
            holds = [session.lock(k).acquire(timeout=5) for k in keys]
            ids = set()
            for k, h in zip(keys, holds):
                i = info(_node_client(cluster, rc, k), k)
                assert i["owner"].decode() == h.owner
                assert i["keepalive_client"] == session.session_client_id(k)
                ids.add((rc.get_node_from_key(k).port, session.session_client_id(k)))
            assert len(ids) == 3  # one session connection per node
            time.sleep(2.5)  # past the lease: kept alive on every node
            for k, h in zip(keys, holds):
                assert info(_node_client(cluster, rc, k), k)["owner"].decode() == h.owner
                h.release()
                assert info(_node_client(cluster, rc, k), k) is None

            m = session.multilock(["{acct}:1", "{acct}:2"]).acquire(timeout=5)
            nc = _node_client(cluster, rc, "{acct}:1")
            assert info(nc, "{acct}:2")["keepalive_client"] == session.session_client_id("{acct}:1")
            m.release()
            assert info(nc, "{acct}:1") is None
            with pytest.raises(CommandError, match="hash tag"):
                session.multilock(["acct:1", "acct:2"]).acquire(timeout=0)

            # a wait on a cluster node, served when the holder releases
            k = keys[0]
            _node_client(cluster, rc, k).execute_command("LOCK.ACQUIRE", k, "other", "PX", 300)
            with session.lock(k).acquire(timeout=5) as h:
                assert info(_node_client(cluster, rc, k), k)["owner"].decode() == h.owner
    finally:
        rc.close()


def test_sentinel_failover_reattaches_on_new_master(tmp_path):
    master = Server().start()
    replica = Server(args=["--replicaof", "127.0.0.1", str(master.port)]).start()
    sentinel_port = free_port()
    sdir = tmp_path / "sentinel"
    sdir.mkdir()
    conf = sdir / "sentinel.conf"
    conf.write_text(
        f"port {sentinel_port}\nbind 127.0.0.1\ndir {sdir}\nlogfile sentinel.log\n"
        "sentinel announce-ip 127.0.0.1\n"
        f"sentinel monitor m 127.0.0.1 {master.port} 1\n"
        "sentinel down-after-milliseconds m 2000\n"
        "sentinel failover-timeout m 2000\n"
        "sentinel parallel-syncs m 1\n"
    )
    proc = subprocess.Popen([SERVER, str(conf), "--sentinel"], cwd=sdir, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        rep = replica.client()
        wait_for("replica in sync", lambda: rep.info("replication").get("master_link_status") == "up")
        sentinel = Sentinel([("127.0.0.1", sentinel_port)], socket_timeout=1)
        wait_for("sentinel knows the replica", lambda: _try(lambda: len(sentinel.discover_slaves("m")) == 1), timeout=15)
        client = sentinel.master_for("m", socket_timeout=2)
        lease = 10000
        with Session(client, lease_ms=lease) as session:
            hold = session.lock("job").acquire(timeout=5)
            assert master.client().execute_command("WAIT", 1, 2000) == 1
            t0 = time.monotonic()
            master.kill()
            wait_for("failover", lambda: _try(lambda: sentinel.discover_master("m")[1] == replica.port), timeout=lease / 1000)
            wait_for("re-attached on the new master",
                     lambda: _try(lambda: info(rep, "job").get("keepalive_client") == session.session_client_id()),
                     timeout=lease / 1000)
            took = time.monotonic() - t0
            print(f"sentinel failover: re-attached on the new master {took * 1000:.0f} ms after the kill (lease {lease} ms)")
            assert took < lease / 1000
            assert info(rep, "job")["owner"].decode() == hold.owner and not hold.lost.is_set()
            hold.release()
            assert info(rep, "job") is None
    finally:
        proc.kill()
        proc.wait()
        master.cleanup()
        replica.cleanup()


def _try(f):
    try:
        return f()
    except Exception:  # noqa: BLE001
        return False


async def test_asyncio_cluster(cluster):
    from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
    from redis_lock_client.asyncio import Session as AsyncSession

    rc = AsyncRedisCluster(host="127.0.0.1", port=cluster[0].port)
    sync_rc = RedisCluster(host="127.0.0.1", port=cluster[0].port)
    try:
        keys, ports = [], set()
        for i in range(100):
            k = f"ak{i}"
            p = sync_rc.get_node_from_key(k).port
            if p not in ports:
                ports.add(p)
                keys.append(k)
        async with AsyncSession(rc, lease_ms=2000) as session:
            holds = [await session.lock(k).acquire(timeout=5) for k in keys]
            for k, h in zip(keys, holds):
                i = info(_node_client(cluster, sync_rc, k), k)
                assert i["owner"].decode() == h.owner
                assert i["keepalive_client"] == await session.session_client_id(k)
            m = await session.multilock(["{t}:1", "{t}:2"]).acquire(timeout=5)
            with pytest.raises(CommandError, match="hash tag"):
                await session.multilock(["t:1", "t:2"]).acquire(timeout=0)
            k = keys[1]
            await holds[1].release()
            _node_client(cluster, sync_rc, k).execute_command("LOCK.ACQUIRE", k, "other", "PX", 300)
            h = await session.lock(k).acquire(timeout=5)  # waits on the node, served at the lease's end
            assert info(_node_client(cluster, sync_rc, k), k)["owner"].decode() == h.owner
            await h.release()
            await m.release()
        for k in keys:
            assert info(_node_client(cluster, sync_rc, k), k) is None
    finally:
        await rc.aclose()
        sync_rc.close()


def test_cluster_dropin(cluster):
    from redis_lock_client import ModuleLock, close_default_session

    rc = RedisCluster(host="127.0.0.1", port=cluster[0].port)
    try:
        for name, timeout in (("d1", 5), ("d2", None)):
            lock = rc.lock(name, timeout=timeout, lock_class=ModuleLock)
            assert lock.acquire(blocking=False)
            assert lock.owned()
            assert not rc.lock(name, lock_class=ModuleLock).acquire(blocking_timeout=0.05)
            i = info(_node_client(cluster, rc, name), name)
            assert ("keepalive_client" in i) == (timeout is None)
            lock.release()
            assert not lock.locked()
        close_default_session(rc)
    finally:
        rc.close()


def test_cluster_failover_rehomes_the_session(tmp_path):
    nodes = []
    try:
        nodes = _start_cluster(3, timeout_ms=1000, replicas=1)
        rc = RedisCluster(host="127.0.0.1", port=nodes[0].port)
        key = "fo"
        master = next(n for n in nodes[:3] if n.port == rc.get_node_from_key(key).port)
        replica = nodes[3]
        master_id = master.client(decode_responses=True).execute_command("CLUSTER", "MYID")
        rep = replica.client(decode_responses=True)
        rep.execute_command("CLUSTER", "REPLICATE", master_id)
        wait_for("replica in sync", lambda: rep.info("replication").get("master_link_status") == "up", timeout=15)
        lease = 8000
        with Session(rc, lease_ms=lease) as session:
            hold = session.lock(key).acquire(timeout=5)
            assert master.client().execute_command("WAIT", 1, 2000) == 1
            t0 = time.monotonic()
            master.kill()
            wait_for("replica promoted", lambda: rep.info("replication").get("role") == "master", timeout=lease / 1000)
            wait_for("re-attached on the promoted replica",
                     lambda: _try(lambda: info(replica.client(), key).get("keepalive_client") == session.session_client_id(key)),
                     timeout=lease / 1000)
            took = time.monotonic() - t0
            print(f"cluster failover: hold re-attached on the promoted replica {took * 1000:.0f} ms after the kill (lease {lease} ms)")
            assert info(replica.client(), key)["owner"].decode() == hold.owner and not hold.lost.is_set()
            hold.release()
            assert info(replica.client(), key) is None
        rc.close()
    finally:
        for n in nodes:
            n.cleanup()


async def test_asyncio_cluster_failover_rehomes_the_session():
    from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
    from redis_lock_client.asyncio import Session as AsyncSession
    import asyncio

    nodes = []
    try:
        nodes = _start_cluster(3, timeout_ms=1000, replicas=1)
        rc = AsyncRedisCluster(host="127.0.0.1", port=nodes[0].port)
        sync_rc = RedisCluster(host="127.0.0.1", port=nodes[0].port)
        key = "afo"
        master = next(n for n in nodes[:3] if n.port == sync_rc.get_node_from_key(key).port)
        sync_rc.close()
        replica = nodes[3]
        rep = replica.client(decode_responses=True)
        rep.execute_command("CLUSTER", "REPLICATE", master.client(decode_responses=True).execute_command("CLUSTER", "MYID"))
        wait_for("replica in sync", lambda: rep.info("replication").get("master_link_status") == "up", timeout=15)
        lease = 8000
        async with AsyncSession(rc, lease_ms=lease) as session:
            hold = await session.lock(key).acquire(timeout=5)
            assert master.client().execute_command("WAIT", 1, 2000) == 1
            t0 = time.monotonic()
            master.kill()
            deadline = time.monotonic() + lease / 1000
            while True:
                i = _try(lambda: info(replica.client(), key))
                bound = i and i.get("keepalive_client")
                if bound and session._conns.get(session._node_of(key)) and bound == session._conns[session._node_of(key)].id:
                    break
                assert time.monotonic() < deadline, "not re-attached on the promoted replica within the lease"
                await asyncio.sleep(0.02)
            print(f"asyncio cluster failover: re-attached {(time.monotonic() - t0) * 1000:.0f} ms after the kill (lease {lease} ms)")
            assert not hold.lost.is_set()
            await hold.release()
            assert info(replica.client(), key) is None
        await rc.aclose()
    finally:
        for n in nodes:
            n.cleanup()
