package lock.redisson.harness;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.function.Supplier;

import redis.clients.jedis.DefaultJedisClientConfig;
import redis.clients.jedis.Jedis;
import redis.clients.jedis.exceptions.JedisDataException;

/**
 * A master and one replica, both with the module, watched by three sentinels (the server binary
 * run as {@code <binary> sentinel.conf --sentinel}, each on a free loopback port in its own
 * directory, killed by its PID on {@link #close()}), as a Sentinel deployment has them; and the
 * questions a test asks of it: which server the sentinels name as master (as a client finds
 * it), whether the group has settled, and a clean failover forced on demand.
 *
 * <p>The sentinels announce themselves on 127.0.0.1, where they listen: Redisson's sentinel mode
 * connects to the sentinels {@code SENTINEL SENTINELS} lists (and refuses to start with fewer
 * than two), and by default a sentinel gives the address of its link to the master.
 */
public final class SentinelGroup implements AutoCloseable {
    public static final String MASTER_NAME = "m";
    /** The channel the sentinels publish on through every server they watch, and listen to. */
    public static final String HELLO_CHANNEL = "__sentinel__:hello";
    /**
     * How long a master must not answer before a sentinel thinks it down. A sentinel pings an
     * instance only once {@code min(this, 1 s)} has passed since its last reply, counting from
     * when it (re)created its link: with 1 s or less, a fresh link to a newly promoted master gets
     * its first PING just as that much has passed, and the sentinels can see the new master down
     * a moment after the switch and fail over again (the Rust suite saw it after about half of
     * its failovers with 400 ms). Above 1 s plus the sentinels' 100 ms timer, with margin.
     */
    static final long DOWN_AFTER_MS = 2000;
    /** Bounds each step of a failover; a sentinel does not try the same master again for twice this. */
    static final long FAILOVER_TIMEOUT_MS = 2000;
    static final int QUORUM = 2;
    /**
     * How long the sentinels may take to find each other (hello messages every 2 s), a replica
     * (the master's INFO, every 10 s), or to settle after a failover; reached only on failure.
     */
    public static final Duration SETTLE = Duration.ofSeconds(60);

    private final List<Server> servers;
    private final List<Sentinel> sentinels = new ArrayList<>();

    private SentinelGroup(List<Server> servers) {
        this.servers = servers;
    }

    /** A master, its replica (link up), three sentinels that know each other and the replica. */
    public static SentinelGroup start() {
        List<Server> servers = new ArrayList<>();
        SentinelGroup group = new SentinelGroup(servers);
        try {
            Server master = Server.start();
            servers.add(master);
            servers.add(master.startReplica(Server.builder()));
            for (int i = 0; i < 3; i++) {
                group.sentinels.add(Sentinel.start(master));
            }
            group.waitFor("every sentinel to find the other sentinels and the replica", () -> {
                for (Sentinel s : group.sentinels) {
                    Map<String, String> seen = s.ask(j -> j.sentinelMaster(MASTER_NAME));
                    if (!"2".equals(seen.get("num-other-sentinels")) || !"1".equals(seen.get("num-slaves"))) {
                        return s + " sees " + seen.get("num-other-sentinels") + " other sentinels and "
                                + seen.get("num-slaves") + " replicas";
                    }
                }
                return null;
            });
            return group;
        } catch (RuntimeException | Error e) {
            group.close();
            throw e;
        }
    }

    /** The sentinels' addresses as Redisson takes them. */
    public List<String> sentinelUrls() {
        return sentinels.stream().map(s -> "redis://127.0.0.1:" + s.port).toList();
    }

    /** The servers, the first started as master. */
    public List<Server> servers() {
        return servers;
    }

    /** The server of the group that is not {@code server}. */
    public Server other(Server server) {
        return servers.get(0) == server ? servers.get(1) : servers.get(0);
    }

    /**
     * The master as a client finds it now: the server every sentinel names, answering {@code
     * ROLE} as a master. Waits until it is so.
     */
    public Server master() {
        return masterOtherThan(null);
    }

    /** {@link #master()}, once it is not {@code old}. */
    private Server masterOtherThan(Server old) {
        Server[] found = new Server[1];
        waitFor("the sentinels to agree on a master" + (old == null ? "" : " other than " + old), () -> {
            String why = agreedMaster(found);
            if (why != null) {
                return why;
            }
            if (found[0] == old) {
                return "every sentinel still names " + old;
            }
            try (Jedis jedis = found[0].jedis()) {
                String role = String.valueOf(jedis.role().get(0));
                return "master".equals(role) ? null : found[0] + ", named by every sentinel, is a " + role;
            }
        });
        return found[0];
    }

    /** Null with {@code found[0]} set when every sentinel names the same server, else why not. */
    private String agreedMaster(Server[] found) {
        Server agreed = null;
        for (Sentinel s : sentinels) {
            List<String> addr;
            try {
                addr = s.ask(j -> j.sentinelGetMasterAddrByName(MASTER_NAME));
            } catch (RuntimeException e) {
                return s + ": " + e;
            }
            Server named = servers.stream().filter(v -> v.address().equals(addr.get(0) + ":" + addr.get(1)))
                    .findFirst().orElse(null);
            if (named == null) {
                return s + " names " + addr + ", none of " + servers;
            }
            if (agreed != null && agreed != named) {
                return "the sentinels name " + agreed + " and " + named;
            }
            agreed = named;
        }
        found[0] = agreed;
        return null;
    }

    /**
     * Waits until the group has settled and returns its master: every sentinel names it and sees
     * it and the other server with no trouble flag and no failover under way; it is a master
     * with the other attached online, and the other its replica, link up, no sync under way.
     */
    public Server waitUntilSettled() {
        Server[] master = new Server[1];
        waitFor("the sentinels and servers to settle", () -> unsettled(master));
        return master[0];
    }

    private String unsettled(Server[] found) {
        String why = agreedMaster(found);
        if (why != null) {
            return why;
        }
        Server master = found[0];
        Server replica = other(master);
        for (Sentinel s : sentinels) {
            Map<String, String> seen = s.ask(j -> j.sentinelMaster(MASTER_NAME));
            if (troubled(seen.get("flags"))) {
                return s + " sees the master as " + seen.get("flags");
            }
            List<Map<String, String>> replicas = s.ask(j -> j.sentinelReplicas(MASTER_NAME));
            Map<String, String> entry = replicas.stream()
                    .filter(r -> replica.address().equals(r.get("ip") + ":" + r.get("port")))
                    .findFirst().orElse(null);
            if (entry == null) {
                return s + " does not list replica " + replica;
            }
            if (troubled(entry.get("flags"))) {
                return s + " sees replica " + replica + " as " + entry.get("flags");
            }
        }
        String role = master.info("replication", "role");
        String online = master.info("replication", "slave0");
        if (!"master".equals(role) || online == null || !online.contains("port=" + replica.port + ",state=online")) {
            return master + " is a " + role + " with replica " + online;
        }
        String following = replica.info("replication", "master_port");
        String link = replica.info("replication", "master_link_status");
        String syncing = replica.info("replication", "master_sync_in_progress");
        if (!String.valueOf(master.port).equals(following) || !"up".equals(link) || !"0".equals(syncing)) {
            return replica + " follows " + following + ", link " + link + ", syncing " + syncing;
        }
        return null;
    }

    /** Flags that say a sentinel does not see an instance as healthy. */
    private static boolean troubled(String flags) {
        for (String flag : String.valueOf(flags).split(",")) {
            if (List.of("s_down", "o_down", "disconnected", "failover_in_progress", "promoted",
                    "reconf_sent", "reconf_inprog").contains(flag)) {
                return true;
            }
        }
        return false;
    }

    /**
     * A clean forced failover from {@code old} to {@code next}: {@link #failover}, then {@code
     * old} made its replica at once. Sentinel would do that only about 10 s later, when the old
     * master has reported its role for 8 s, and in the same transaction run {@code CLIENT KILL
     * TYPE normal}, closing the old master's clients before their answers are written. Returns
     * how long the sentinels took to name {@code next}.
     */
    public Duration forceFailover(Server old, Server next) {
        Duration took = failover(old, next);
        try (Jedis jedis = old.jedis()) {
            jedis.replicaof("127.0.0.1", next.port);
        }
        return took;
    }

    /**
     * {@code SENTINEL FAILOVER} on the first sentinel (retried while it answers {@code
     * NOGOODSLAVE}: it needs a fresh INFO of the replica of its own first), until every sentinel
     * names {@code next} and it answers as a master; the old master is left to Sentinel, which
     * demotes it itself about 10 s later. The caller has let the replica catch up (a forced
     * failover does not wait for it). Returns how long the sentinels took to name {@code next}.
     *
     * <p>First every sentinel must have seen {@code next} report itself a replica (its {@code
     * role-reported}, from its latest {@code INFO}, every 10 s for a replica). A sentinel whose
     * latest {@code INFO} of {@code next} was taken while it was still a master (the old
     * master of a failover a few seconds before, made a replica since) and that sees it report
     * {@code master} again at its next one, once the promotion below has made it a master but
     * before the new configuration has reached that sentinel, takes it for a replica claiming
     * to be a master for over 8 s and sends it {@code REPLICAOF} the old master ({@code
     * +convert-to-slave}): the new master turns replica, and the sentinels fail back over about
     * 25 s later. Seen once when this failover came 10 s after the one before.
     */
    public Duration failover(Server old, Server next) {
        waitFor("every sentinel to see " + next + " report itself a replica", () -> {
            for (Sentinel s : sentinels) {
                List<Map<String, String>> replicas = s.ask(j -> j.sentinelReplicas(MASTER_NAME));
                String role = replicas.stream()
                        .filter(r -> next.address().equals(r.get("ip") + ":" + r.get("port")))
                        .map(r -> r.get("role-reported")).findFirst().orElse(null);
                if (!"slave".equals(role)) {
                    return s + " last saw " + next + " report role " + role;
                }
            }
            return null;
        });
        long start = System.nanoTime();
        Sentinel sentinel = sentinels.get(0);
        Processes.waitUntil("the sentinel to start a failover", SETTLE, () -> {
            try {
                sentinel.ask(j -> j.sentinelFailover(MASTER_NAME));
                return true;
            } catch (JedisDataException e) {
                if (!e.getMessage().startsWith("NOGOODSLAVE")) {
                    throw e;
                }
                return false;
            }
        });
        Server promoted = masterOtherThan(old);
        Duration took = Duration.ofNanos(System.nanoTime() - start);
        if (promoted != next) {
            throw new AssertionError("the sentinels promoted " + promoted + ", not " + next);
        }
        return took;
    }

    /**
     * Waits until neither server holds anything a test left behind ({@link Leftovers}: keys,
     * subscribed channels, module queues), but the channel the sentinels talk on through every
     * server they watch ({@link #HELLO_CHANNEL}). Replicas too: what the master deleted and the
     * subscriptions Redisson had there (it reads from the replica by default).
     */
    public void assertNothingLeft() {
        for (Server server : servers) {
            Processes.waitFor("nothing left on " + server, Duration.ofSeconds(20),
                    () -> Leftovers.seen(server, List.of(), List.of(HELLO_CHANNEL)));
        }
    }

    /** {@link Processes#waitFor} within {@link #SETTLE}, failing with every sentinel's log tail. */
    private void waitFor(String what, Supplier<String> check) {
        try {
            Processes.waitFor(what, SETTLE, () -> {
                try {
                    return check.get();
                } catch (RuntimeException e) {
                    // A server or sentinel that does not answer yet: asked again.
                    return e.toString();
                }
            });
        } catch (AssertionError e) {
            StringBuilder logs = new StringBuilder(e.getMessage());
            sentinels.forEach(s -> logs.append("\n").append(s).append(":\n").append(s.logTail()));
            throw new AssertionError(logs.toString(), e);
        }
    }

    @Override
    public void close() {
        sentinels.forEach(Sentinel::close);
        servers.forEach(Server::close);
    }

    /** One sentinel process. */
    static final class Sentinel implements AutoCloseable {
        final int port;
        final Path dir;
        private Process process;

        private Sentinel(int port, Path dir) {
            this.port = port;
            this.dir = dir;
        }

        static Sentinel start(Server master) {
            List<String> errors = new ArrayList<>();
            for (int attempt = 0; attempt < 3; attempt++) {
                int port = Processes.freePort();
                Sentinel sentinel = new Sentinel(port, Processes.freshDir("sentinel-" + port));
                try {
                    sentinel.spawn(master);
                    return sentinel;
                } catch (IllegalStateException e) {
                    errors.add("port " + port + ": " + e.getMessage());
                    sentinel.close();
                }
            }
            throw new IllegalStateException(Server.binary() + " --sentinel did not start:\n" + String.join("\n", errors));
        }

        private void spawn(Server master) {
            // The sentinel rewrites its file (ids, epochs, what it discovered).
            Path conf = dir.resolve("sentinel.conf");
            String text = "port " + port + "\n"
                    + "bind 127.0.0.1\n"
                    + "dir " + dir + "\n"
                    + "logfile sentinel.log\n"
                    + "sentinel announce-ip 127.0.0.1\n"
                    + "sentinel monitor " + MASTER_NAME + " 127.0.0.1 " + master.port + " " + QUORUM + "\n"
                    + "sentinel down-after-milliseconds " + MASTER_NAME + " " + DOWN_AFTER_MS + "\n"
                    + "sentinel failover-timeout " + MASTER_NAME + " " + FAILOVER_TIMEOUT_MS + "\n"
                    + "sentinel parallel-syncs " + MASTER_NAME + " 1\n";
            try {
                Files.writeString(conf, text);
                process = Processes.track(new ProcessBuilder(Server.binary(), conf.toString(), "--sentinel")
                        .directory(dir.toFile())
                        .redirectOutput(ProcessBuilder.Redirect.DISCARD)
                        .redirectError(ProcessBuilder.Redirect.DISCARD)
                        .start());
            } catch (IOException e) {
                throw new IllegalStateException("start a sentinel in " + dir + ": " + e.getMessage(), e);
            }
            long deadline = System.nanoTime() + Processes.PATIENCE.toNanos();
            while (System.nanoTime() < deadline) {
                if (!process.isAlive()) {
                    throw new IllegalStateException("exited with " + process.exitValue() + ":\n" + logTail());
                }
                try (Jedis jedis = new Jedis("127.0.0.1", port, 200)) {
                    if ("PONG".equals(jedis.ping())) {
                        return;
                    }
                } catch (RuntimeException e) {
                    // Not listening yet.
                }
                Processes.sleep(5);
            }
            throw new IllegalStateException("did not answer PING:\n" + logTail());
        }

        interface Question<T> {
            T ask(Jedis sentinel);
        }

        /** One question on a connection of its own (1 s timeouts: a sentinel answers at once). */
        <T> T ask(Question<T> question) {
            try (Jedis jedis = new Jedis("127.0.0.1", port, DefaultJedisClientConfig.builder()
                    .connectionTimeoutMillis(1000).socketTimeoutMillis(1000).build())) {
                return question.ask(jedis);
            }
        }

        String logTail() {
            try {
                List<String> lines = Files.readAllLines(dir.resolve("sentinel.log"));
                return String.join("\n", lines.subList(Math.max(0, lines.size() - 20), lines.size()));
            } catch (IOException e) {
                return "(no log: " + e.getMessage() + ")";
            }
        }

        @Override
        public void close() {
            if (process != null) {
                Processes.kill(process);
            }
            Processes.deleteTree(dir);
        }

        @Override
        public String toString() {
            return "sentinel 127.0.0.1:" + port;
        }
    }
}
