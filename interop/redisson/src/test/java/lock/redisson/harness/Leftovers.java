package lock.redisson.harness;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

import redis.clients.jedis.Jedis;

/**
 * What a test must leave behind on a server once its holders are done: no key (locks, queues,
 * Redisson's unlock latch keys, semaphore permit sets), no channel anyone is subscribed to
 * (Redisson unsubscribes once none of its threads waits; sharded channels too), and no caller
 * queued in the module. Redisson deletes its latch keys and unsubscribes asynchronously, so
 * this waits for the state rather than reading it once. Redisson 3.x's unlock latch keys, which
 * it fails to delete and leaves to expire, are allowed ({@link UnlockLatches}).
 */
public final class Leftovers {
    private Leftovers() {}

    /** Waits until {@code server} holds nothing but {@code kept} keys (e.g. fencing counters). */
    public static void assertNone(Server server, String... kept) {
        Processes.waitFor("nothing left on " + server, Duration.ofSeconds(20), () -> seen(server, List.of(kept)));
    }

    /** What is still there, or null when nothing is. */
    public static String seen(Server server, List<String> kept) {
        return seen(server, kept, List.of());
    }

    /** The same, where {@code keptChannels} are subscribed by others (the sentinels' hello channel). */
    public static String seen(Server server, List<String> kept, List<String> keptChannels) {
        try (Jedis jedis = server.jedis()) {
            List<String> left = new ArrayList<>();
            List<String> keys = new ArrayList<>(jedis.keys("*"));
            keys.removeAll(kept);
            keys.removeAll(UnlockLatches.leftByRedisson3(jedis, keys));
            if (!keys.isEmpty()) {
                left.add("keys " + keys);
            }
            List<String> channels = new ArrayList<>(jedis.pubsubChannels());
            channels.removeAll(keptChannels);
            if (!channels.isEmpty()) {
                left.add("subscribed channels " + channels);
            }
            List<String> shardChannels = jedis.pubsubShardChannels();
            if (!shardChannels.isEmpty()) {
                left.add("subscribed shard channels " + shardChannels);
            }
            List<?> queues = new ModuleCaller(jedis).queues();
            if (!queues.isEmpty()) {
                left.add("module queues " + queues);
            }
            return left.isEmpty() ? null : String.join("; ", left);
        }
    }
}
