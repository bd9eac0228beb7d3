package lock.redisson.harness;

import java.util.List;
import java.util.function.Consumer;

import org.redisson.Redisson;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;

/**
 * Redisson clients as their users configure them: Redisson's defaults (watchdog 30 s, retries,
 * pool sizes, {@code checkLockSyncedSlaves}) unless a test says otherwise. Each client is one
 * "process" of Redisson's protocol: its own id, its own pub/sub connections, its own watchdog.
 */
public final class Redissons {
    private Redissons() {}

    public static RedissonClient single(Server server) {
        return single(server, c -> {});
    }

    public static RedissonClient single(Server server, Consumer<Config> tweak) {
        return single(server.url(), tweak);
    }

    /** A client of the server at {@code url} ({@code redis://host:port}). */
    public static RedissonClient single(String url, Consumer<Config> tweak) {
        Config config = new Config();
        config.useSingleServer().setAddress(url);
        tweak.accept(config);
        return Redisson.create(config);
    }

    /** A client of a Redis Cluster, given some of its nodes (it discovers the rest). */
    public static RedissonClient cluster(List<Server> nodes, Consumer<Config> tweak) {
        Config config = new Config();
        var cluster = config.useClusterServers();
        nodes.forEach(n -> cluster.addNodeAddress(n.url()));
        tweak.accept(config);
        return Redisson.create(config);
    }

    /** A client that finds its master through Sentinel. */
    public static RedissonClient sentinel(String masterName, List<String> sentinelUrls, Consumer<Config> tweak) {
        Config config = new Config();
        var sentinel = config.useSentinelServers().setMasterName(masterName);
        sentinelUrls.forEach(sentinel::addSentinelAddress);
        tweak.accept(config);
        return Redisson.create(config);
    }

    /**
     * A Redisson thread's owner id, {@code <client id>:<thread id>}: its lock field, a reader's
     * field, and the writer's field without {@code :write}.
     */
    public static String owner(RedissonClient client, Thread thread) {
        return client.getId() + ":" + thread.getId();
    }

    /** The Redisson version on the classpath (surefire passes it; the jar's manifest says it too). */
    public static String version() {
        String given = System.getProperty("redisson.version");
        if (given != null) {
            return given;
        }
        String fromJar = Redisson.class.getPackage().getImplementationVersion();
        return fromJar != null ? fromJar : "unknown";
    }
}
