package lock.redisson.harness;

import java.util.Set;

/**
 * Whether a Redisson thread that waits is parked on its wake-up latch: the
 * {@code java.util.concurrent.Semaphore} of its {@code RedissonLockEntry} (locks, semaphores)
 * or the {@code ReclosableLatch} of its {@code RedissonCountDownLatchEntry}, which only a
 * message on its channel releases (or the timeout the thread gave that wait). A thread still
 * in its retry's script, or blocked on a reply, is not: a permit it finds in that script is
 * no proof that a message woke it, so tests that show the wake-up by message wait for this
 * first. And a read-write lock's {@code 1} (a write unlock) releases only the threads parked at
 * that moment ({@code LockPubSub}: {@code release(getQueueLength())}): a thread between its
 * retry and its wait misses it and waits out the lease it was told.
 */
public final class Parked {
    private static final Set<String> LATCHES = Set.of("java.util.concurrent.Semaphore", "org.redisson.misc.ReclosableLatch");

    private Parked() {}

    /** Waits until {@code waiter}'s thread is parked on its latch: from then on only a message (or its own timeout) moves it. */
    public static void waitUntilParked(Async<?> waiter) {
        Processes.waitUntil(waiter.thread().getName() + " parked on its wake-up latch",
                () -> onItsWakeUpLatch(waiter.thread()));
    }

    /** Parked (the top frame) inside the latch's wait, called from Redisson's own code. */
    public static boolean onItsWakeUpLatch(Thread thread) {
        StackTraceElement[] stack = thread.getStackTrace();
        if (stack.length == 0 || !stack[0].getMethodName().equals("park")) {
            return false;
        }
        for (int i = 0; i + 1 < stack.length; i++) {
            if (LATCHES.contains(stack[i].getClassName()) && stack[i + 1].getClassName().startsWith("org.redisson.")) {
                return true;
            }
        }
        return false;
    }
}
