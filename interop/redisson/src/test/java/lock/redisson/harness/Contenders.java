package lock.redisson.harness;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicInteger;

import org.redisson.api.RLock;

/**
 * Threads that each run a cycle (acquire, the guarded section, release) a number of times, on
 * the same names at the same time: Redisson threads and module callers side by side. Failures
 * in any thread fail the test with the thread's name; {@link #join} bounds the whole run.
 */
public final class Contenders {
    /** One cycle of a contender; {@code i} counts its cycles from 0. */
    public interface Cycle {
        void run(int i) throws Exception;
    }

    private final List<Thread> threads = new ArrayList<>();
    private final Map<String, AtomicInteger> done = new TreeMap<>();
    private final ConcurrentLinkedQueue<String> failures = new ConcurrentLinkedQueue<>();

    public Contenders add(String name, int cycles, Cycle cycle) {
        AtomicInteger count = new AtomicInteger();
        done.put(name, count);
        Thread thread = new Thread(() -> {
            try {
                for (int i = 0; i < cycles; i++) {
                    cycle.run(i);
                    count.incrementAndGet();
                }
            } catch (Throwable e) {
                StringBuilder why = new StringBuilder(name + " failed in cycle " + count.get() + ": " + e);
                for (Throwable c = e.getCause(); c != null; c = c.getCause()) {
                    why.append(" / caused by ").append(c);
                }
                failures.add(why.toString());
            }
        }, name);
        thread.setDaemon(true);
        threads.add(thread);
        return this;
    }

    /**
     * A Redisson thread on an exclusive lock (plain, fair, non-reentrant): each cycle
     * {@code lock()}, 1 ms inside {@code guard}, {@code unlock()}.
     */
    public Contenders addRedisson(String who, int cycles, RLock lock, Guard guard) {
        return add(who, cycles, i -> {
            lock.lock();
            try {
                guard.hold(who, () -> Processes.sleep(1));
            } finally {
                lock.unlock();
            }
        });
    }

    /**
     * A module caller on the exclusive lock {@code key}, owner {@code who}: each cycle
     * {@code LOCK.ACQUIRE ... PX leaseMs BLOCK 0} (answered 1), 1 ms inside {@code guard},
     * {@code LOCK.RELEASE} (answered 0).
     */
    public Contenders addModule(String who, int cycles, ModuleCaller caller, String key, long leaseMs, Guard guard) {
        return add(who, cycles, i -> {
            Long granted = caller.acquireWaiting(key, who, leaseMs, 0);
            if (!Long.valueOf(1).equals(granted)) {
                throw new AssertionError(who + ": LOCK.ACQUIRE answered " + granted + ", not 1");
            }
            guard.hold(who, () -> Processes.sleep(1));
            long left = caller.release(key, who);
            if (left != 0) {
                throw new AssertionError(who + ": LOCK.RELEASE answered " + left + ", not 0");
            }
        });
    }

    public Contenders start() {
        threads.forEach(Thread::start);
        return this;
    }

    /** Waits for every contender; fails on a contender's failure or one still running after {@code bound}. */
    public void join(Duration bound) {
        long deadline = System.nanoTime() + bound.toNanos();
        for (Thread thread : threads) {
            try {
                thread.join(Math.max(1, (deadline - System.nanoTime()) / 1_000_000));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new AssertionError("interrupted", e);
            }
        }
        List<String> running = threads.stream().filter(Thread::isAlive).map(Thread::getName).toList();
        if (!failures.isEmpty()) {
            throw new AssertionError(failures.size() + " contenders failed: " + failures);
        }
        if (!running.isEmpty()) {
            throw new AssertionError("still running after " + bound.toMillis() + " ms: " + running + "; cycles done: " + done);
        }
    }

    /** Cycles each contender completed. */
    public Map<String, Integer> done() {
        Map<String, Integer> counts = new TreeMap<>();
        done.forEach((k, v) -> counts.put(k, v.get()));
        return counts;
    }
}
