package lock.redisson.harness;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The check inside every hold: who is inside the protected section right now. An exclusive
 * hold must find nobody else inside; a shared (read) hold no exclusive one; a permit no more
 * than {@code capacity} others. Every breach is recorded with who was inside, and the test
 * asserts there were none. Holders of every kind (Redisson threads and module callers) enter
 * the same guard, so an overlap between the two protocols is caught as surely as one within
 * either.
 */
public final class Guard {
    private final int capacity;
    private final AtomicInteger exclusive = new AtomicInteger();
    private final AtomicInteger shared = new AtomicInteger();
    private final AtomicLong entries = new AtomicLong();
    private final AtomicInteger most = new AtomicInteger();
    private final List<String> breaches = Collections.synchronizedList(new ArrayList<>());

    /** What runs inside a hold; may throw (a failed assertion inside fails the hold's thread). */
    public interface Section {
        void run() throws Exception;
    }

    private Guard(int capacity) {
        this.capacity = capacity;
    }

    /** One holder at a time (a lock). */
    public static Guard exclusive() {
        return new Guard(1);
    }

    /** At most {@code permits} at a time (a semaphore's permits). */
    public static Guard permits(int permits) {
        return new Guard(permits);
    }

    /** An exclusive hold, or {@code permits} permits of a semaphore: {@code body} runs inside. */
    public void hold(String who, int permits, Section body) {
        int now = exclusive.addAndGet(permits);
        entries.incrementAndGet();
        most.accumulateAndGet(now, Math::max);
        if (now > capacity || shared.get() > 0) {
            breaches.add(who + " entered with " + now + " of " + capacity + " in use and " + shared.get() + " readers");
        }
        try {
            run(body);
        } finally {
            exclusive.addAndGet(-permits);
        }
    }

    public void hold(String who, Section body) {
        hold(who, 1, body);
    }

    /** A read hold: any number together, never beside an exclusive one. */
    public void read(String who, Section body) {
        shared.incrementAndGet();
        entries.incrementAndGet();
        if (exclusive.get() > 0) {
            breaches.add(who + " read while a writer held");
        }
        try {
            run(body);
        } finally {
            shared.decrementAndGet();
        }
    }

    private static void run(Section body) {
        try {
            body.run();
        } catch (RuntimeException | Error e) {
            throw e;
        } catch (Exception e) {
            throw new IllegalStateException(e);
        }
    }

    /** Holds entered so far. */
    public long entries() {
        return entries.get();
    }

    /** The most permits in use at once. */
    public int most() {
        return most.get();
    }

    /** Fails with the breaches, if any. */
    public void assertNoBreach() {
        synchronized (breaches) {
            if (!breaches.isEmpty()) {
                throw new AssertionError(breaches.size() + " overlapping holds, first: " + breaches.subList(0, Math.min(5, breaches.size())));
            }
        }
    }
}
