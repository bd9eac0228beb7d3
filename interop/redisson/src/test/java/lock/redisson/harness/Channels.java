package lock.redisson.harness;

/**
 * The channels Redisson's waiters listen on, for a name without a {@code {tag}} of its own (the
 * tests' names): its lock's unlock messages, its read-write lock's, its semaphore's available
 * count, its latch's count-down to zero. Their subscribers show who waits.
 */
public final class Channels {
    private Channels() {}

    public static String lock(String key) {
        return "redisson_lock__channel:{" + key + "}";
    }

    public static String readWrite(String key) {
        return "redisson_rwlock:{" + key + "}";
    }

    public static String semaphore(String key) {
        return "redisson_sc:{" + key + "}";
    }

    public static String latch(String key) {
        return "redisson_countdownlatch__channel__{" + key + "}";
    }
}
