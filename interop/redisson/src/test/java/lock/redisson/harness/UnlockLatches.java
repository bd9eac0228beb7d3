package lock.redisson.harness;

import java.util.ArrayList;
import java.util.List;

import redis.clients.jedis.Jedis;

/**
 * The unlock latch keys Redisson 3.x leaves behind to expire ({@link Leftovers} allows them). Every Redisson unlock's script writes
 * {@code redisson_unlock_latch:{name}:<request id>} (its answer, kept for a retried unlock), and the
 * client deletes it once answered; in 3.52.0 that {@code DEL} names the client's id instead of the
 * request's ({@code RedissonBaseLock.java:231}, {@code getUnlockLatchName(id)}; fixed in 4.3.0 by
 * commit 255aa9748, {@code String id = requestId}), so the key lives until its
 * {@code PX}: (timeout + retry delay) x retry attempts, 16 to 20 s with Redisson's defaults. A
 * test on 3.x that waited for them would wait that long after every unlock.
 */
public final class UnlockLatches {
    /** The longest such key's {@code PX} with Redisson's defaults: (3000 + up to 2000) x 4 ms. */
    public static final long MOST_MS = 20_000;

    private UnlockLatches() {}

    /**
     * Of {@code keys} (on {@code jedis}'s server), those Redisson 3.x left: on the 3.x line, the
     * unlock latch keys, each checked to be set to expire by itself within {@link #MOST_MS}; on
     * 4.x none (Redisson deletes them, and a test waits for that).
     */
    public static List<String> leftByRedisson3(Jedis jedis, List<String> keys) {
        List<String> left = new ArrayList<>();
        if (!Redissons.version().startsWith("3.")) {
            return left;
        }
        for (String key : keys) {
            if (!key.startsWith("redisson_unlock_latch:")) {
                continue;
            }
            long ttl = jedis.pttl(key);
            // -2: it expired since KEYS listed it.
            if (ttl != -2 && (ttl <= 0 || ttl > MOST_MS)) {
                throw new AssertionError(key + " does not expire by itself within " + MOST_MS + " ms: pttl " + ttl);
            }
            left.add(key);
        }
        return left;
    }
}
