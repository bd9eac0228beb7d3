package lock.redisson.harness;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;

import redis.clients.jedis.DefaultJedisClientConfig;
import redis.clients.jedis.Jedis;

/**
 * One real server process (REDIS_SERVER, default redis-server) on a free loopback port, in its
 * own directory, with the module (LOCK_MODULE, default the workspace's
 * target/release/liblock.so) loaded, killed by its PID on {@link #close()}.
 */
public final class Server implements AutoCloseable {
    public final int port;
    public final Path dir;
    private final List<String> args;
    private Process process;

    private Server(int port, Path dir, List<String> args) {
        this.port = port;
        this.dir = dir;
        this.args = args;
    }

    /** A standalone server with the module and its default settings. */
    public static Server start() {
        return builder().start();
    }

    public static Builder builder() {
        return new Builder();
    }

    /** How to start a server: extra server arguments, module arguments, or no module. */
    public static final class Builder {
        private final List<String> serverArgs = new ArrayList<>();
        private final List<String> moduleArgs = new ArrayList<>();
        private boolean withModule = true;

        /** {@code --name value} on the command line. */
        public Builder arg(String name, String... values) {
            serverArgs.add("--" + name);
            serverArgs.addAll(List.of(values));
            return this;
        }

        /** A module load argument ({@code default-lease-ms 5000}). */
        public Builder moduleArg(String name, String value) {
            moduleArgs.add(name);
            moduleArgs.add(value);
            return this;
        }

        public Builder withoutModule() {
            withModule = false;
            return this;
        }

        public Server start() {
            List<String> errors = new ArrayList<>();
            for (int attempt = 0; attempt < 3; attempt++) {
                int port = Processes.freePort();
                Path dir = Processes.freshDir("server-" + port);
                List<String> cmd = new ArrayList<>(List.of(binary(),
                        "--port", String.valueOf(port), "--bind", "127.0.0.1",
                        "--dir", dir.toString(), "--logfile", "redis.log", "--save", "",
                        "--enable-debug-command", "yes", "--repl-diskless-sync-delay", "0"));
                cmd.addAll(serverArgs);
                if (withModule) {
                    cmd.add("--loadmodule");
                    cmd.add(modulePath());
                    cmd.addAll(moduleArgs);
                }
                Server server = new Server(port, dir, cmd);
                try {
                    server.spawn();
                    return server;
                } catch (IllegalStateException e) {
                    errors.add("port " + port + ": " + e.getMessage());
                }
            }
            throw new IllegalStateException(binary() + " did not start:\n" + String.join("\n", errors));
        }
    }

    /** The server binary: REDIS_SERVER, else redis-server from PATH. */
    public static String binary() {
        return Optional.ofNullable(System.getenv("REDIS_SERVER")).filter(s -> !s.isEmpty()).orElse("redis-server");
    }

    /** The module: LOCK_MODULE, else target/release/liblock.so of the workspace above. */
    public static String modulePath() {
        String given = System.getenv("LOCK_MODULE");
        if (given != null && !given.isEmpty()) {
            return given;
        }
        for (Path dir = Path.of("").toAbsolutePath(); dir != null; dir = dir.getParent()) {
            Path candidate = dir.resolve("target/release/liblock.so");
            if (Files.isRegularFile(candidate)) {
                return candidate.toString();
            }
        }
        throw new IllegalStateException("no LOCK_MODULE and no target/release/liblock.so above " + Path.of("").toAbsolutePath());
    }

    private void spawn() {
        try {
            process = Processes.track(new ProcessBuilder(args).directory(dir.toFile())
                    .redirectOutput(ProcessBuilder.Redirect.DISCARD)
                    .redirectError(ProcessBuilder.Redirect.DISCARD)
                    .start());
        } catch (IOException e) {
            throw new IllegalStateException("spawn " + args.get(0) + ": " + e.getMessage(), e);
        }
        long deadline = System.nanoTime() + Processes.PATIENCE.toNanos();
        while (System.nanoTime() < deadline) {
            if (!process.isAlive()) {
                throw new IllegalStateException("exited with " + process.exitValue() + ":\n" + logTail());
            }
            if (answersPing()) {
                return;
            }
            Processes.sleep(5);
        }
        Processes.kill(process);
        throw new IllegalStateException("did not answer PING:\n" + logTail());
    }

    private boolean answersPing() {
        try (Jedis jedis = new Jedis("127.0.0.1", port, 200)) {
            return "PONG".equals(jedis.ping());
        } catch (RuntimeException e) {
            return false;
        }
    }

    public String address() {
        return "127.0.0.1:" + port;
    }

    /** The address as Redisson takes it. */
    public String url() {
        return "redis://" + address();
    }

    public long pid() {
        return process.pid();
    }

    /** A new connection (socket timeout: PATIENCE, so no call can hang a test). */
    public Jedis jedis() {
        return new Jedis("127.0.0.1", port, DefaultJedisClientConfig.builder()
                .socketTimeoutMillis((int) Processes.PATIENCE.toMillis()).build());
    }

    /** A field of INFO {@code section}, or null. */
    public String info(String section, String field) {
        try (Jedis jedis = jedis()) {
            return infoField(jedis.info(section), field);
        }
    }

    static String infoField(String info, String field) {
        for (String line : info.split("\r?\n")) {
            if (line.startsWith(field + ":")) {
                return line.substring(field.length() + 1).trim();
            }
        }
        return null;
    }

    /** Connections subscribed to {@code channel} (Redisson's waiting clients: one per client). */
    public long subscribers(String channel) {
        try (Jedis jedis = jedis()) {
            return jedis.pubsubNumSub(channel).getOrDefault(channel, 0L);
        }
    }

    /** Connections subscribed to the sharded {@code channel} (Redisson on a cluster). */
    public long shardSubscribers(String channel) {
        try (Jedis jedis = jedis()) {
            return jedis.pubsubShardNumSub(channel).getOrDefault(channel, 0L);
        }
    }

    /** Starts a replica of this server and waits until its link is up. */
    public Server startReplica(Builder builder) {
        Server replica = builder.arg("replicaof", "127.0.0.1", String.valueOf(port)).start();
        Processes.waitUntil("replica link up", () -> "up".equals(replica.info("replication", "master_link_status")));
        return replica;
    }

    /** SIGKILL, then waits for the process to be gone. */
    public void kill() {
        if (process != null) {
            Processes.kill(process);
        }
    }

    public boolean alive() {
        return process != null && process.isAlive();
    }

    public String logTail() {
        try {
            List<String> lines = Files.readAllLines(dir.resolve("redis.log"));
            return String.join("\n", lines.subList(Math.max(0, lines.size() - 20), lines.size()));
        } catch (IOException e) {
            return "(no log: " + e.getMessage() + ")";
        }
    }

    @Override
    public void close() {
        kill();
        Processes.deleteTree(dir);
    }

    @Override
    public String toString() {
        return "server " + address();
    }
}
