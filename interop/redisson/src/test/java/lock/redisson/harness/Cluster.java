package lock.redisson.harness;

import java.util.ArrayList;
import java.util.List;

import redis.clients.jedis.Jedis;
import redis.clients.jedis.util.JedisClusterCRC16;

/**
 * A real local Redis Cluster: masters without replicas, each a {@link Server} with the module,
 * {@code --cluster-enabled yes} and its own nodes file (in its own directory), the 16384 slots
 * split in equal ranges (master {@code i} the {@code i}-th, {@code CLUSTER ADDSLOTSRANGE}),
 * joined with {@code CLUSTER MEET}. Ready once every node reports {@code cluster_state:ok} and
 * every node sees the same nodes with the same slots, all connected. No slot moves while a test
 * runs, so the node of a key is known from its slot ({@link #nodeFor}). Every process is killed
 * by its PID on {@link #close()}.
 */
public final class Cluster implements AutoCloseable {
    public static final int SLOTS = 16384;
    /**
     * No test makes a node fail by timeout, so this only has to ride out a slow moment of a busy
     * machine (the Rust suite's value).
     */
    static final int NODE_TIMEOUT_MS = 5000;

    private final List<Server> masters;

    private Cluster(List<Server> masters) {
        this.masters = masters;
    }

    /**
     * {@code count} masters covering all slots. The cluster bus listens on each node's port +
     * 10000, which {@link Processes#freePort()} checks is free too.
     */
    public static Cluster start(int count) {
        List<Server> nodes = new ArrayList<>();
        Cluster cluster = new Cluster(nodes);
        try {
            for (int i = 0; i < count; i++) {
                nodes.add(Server.builder()
                        .arg("cluster-enabled", "yes")
                        .arg("cluster-config-file", "nodes.conf")
                        .arg("cluster-node-timeout", String.valueOf(NODE_TIMEOUT_MS))
                        .start());
            }
            // Distinct config epochs before the nodes meet, as `redis-cli --cluster create` assigns
            // them: otherwise they all start at 0 and the collision rule bumps them one by one
            // after the cluster reports ok, changing the nodes' views while a test reads them.
            for (int i = 0; i < count; i++) {
                try (Jedis jedis = nodes.get(i).jedis()) {
                    jedis.sendCommand(new ModuleCaller.Command("CLUSTER"), "SET-CONFIG-EPOCH", String.valueOf(i + 1));
                    int[] range = cluster.slotRange(i);
                    jedis.clusterAddSlotsRange(range[0], range[1]);
                }
            }
            for (Server node : nodes.subList(1, count)) {
                try (Jedis jedis = node.jedis()) {
                    jedis.clusterMeet("127.0.0.1", nodes.get(0).port);
                }
            }
            Processes.waitFor("the cluster to settle", Processes.PATIENCE, cluster::unsettled);
            return cluster;
        } catch (RuntimeException | Error e) {
            cluster.close();
            throw e;
        }
    }

    /** The masters, in slot order: node {@code i} serves the {@code i}-th range. */
    public List<Server> nodes() {
        return masters;
    }

    /** The slots node {@code i} was given: {first, last}. */
    public int[] slotRange(int i) {
        int per = SLOTS / masters.size();
        int first = i * per;
        int last = i + 1 == masters.size() ? SLOTS - 1 : first + per - 1;
        return new int[] {first, last};
    }

    /** The slot of {@code key} (its hash tag's, if it has one), as the servers compute it. */
    public static int slot(String key) {
        return JedisClusterCRC16.getSlot(key);
    }

    /** The node serving {@code slot}. */
    public Server nodeForSlot(int slot) {
        return masters.get(Math.min(slot / (SLOTS / masters.size()), masters.size() - 1));
    }

    /** The node serving {@code key}'s slot. */
    public Server nodeFor(String key) {
        return nodeForSlot(slot(key));
    }

    /** The first of {@code prefix}0, {@code prefix}1, ... whose slot node {@code i} serves. */
    public String nameOn(int i, String prefix) {
        Server node = masters.get(i);
        for (int n = 0; ; n++) {
            String name = prefix + n;
            if (nodeFor(name) == node) {
                return name;
            }
        }
    }

    /**
     * Null once every node reports {@code cluster_state:ok} and lists every node as a connected
     * master with no other flag ({@code handshake}, {@code fail?}...), with the same slots and
     * epochs as every other node sees; otherwise what is not so yet.
     */
    String unsettled() {
        List<String> first = null;
        for (Server node : masters) {
            try (Jedis jedis = node.jedis()) {
                if (!"ok".equals(Server.infoField(jedis.clusterInfo(), "cluster_state"))) {
                    return node + ": cluster_state not ok";
                }
                List<String> view = view(jedis.clusterNodes());
                if (view.size() != masters.size()) {
                    return node + " knows " + view.size() + " nodes: " + view;
                }
                for (String line : view) {
                    String[] f = line.split(" ");
                    if (!f[2].equals("master") || !f[4].equals("connected") || f.length < 6) {
                        return node + " sees " + line;
                    }
                }
                if (first == null) {
                    first = view;
                } else if (!first.equals(view)) {
                    return node + " sees " + view + ", " + masters.get(0) + " sees " + first;
                }
            } catch (RuntimeException e) {
                return node + ": " + e;
            }
        }
        return null;
    }

    /**
     * {@code CLUSTER NODES} as "id port flags epoch link slots", sorted: what every node must
     * agree on ({@code myself} and the ping times differ from node to node).
     */
    static List<String> view(String clusterNodes) {
        List<String> view = new ArrayList<>();
        for (String line : clusterNodes.split("\r?\n")) {
            if (line.isBlank()) {
                continue;
            }
            String[] f = line.trim().split(" ");
            String port = f[1].replaceAll("@.*", "").replaceAll(".*:", "");
            String flags = f[2].replace("myself,", "");
            StringBuilder slots = new StringBuilder();
            for (int i = 8; i < f.length; i++) {
                slots.append(' ').append(f[i]);
            }
            view.add(f[0] + " " + port + " " + flags + " " + f[6] + " " + f[7] + " " + slots.toString().trim());
        }
        view.sort(null);
        return view;
    }

    /**
     * Waits until no node holds anything a test left behind ({@link Leftovers}: keys, channels
     * and shard channels subscribed, module queues).
     */
    public void assertNothingLeft() {
        for (Server node : masters) {
            Leftovers.assertNone(node);
        }
    }

    /** Every node's {@code flushall}, between tests. */
    public void flushAll() {
        for (Server node : masters) {
            try (Jedis jedis = node.jedis()) {
                jedis.flushAll();
            }
        }
    }

    @Override
    public void close() {
        masters.forEach(Server::close);
    }

    @Override
    public String toString() {
        return "cluster of " + masters;
    }
}
