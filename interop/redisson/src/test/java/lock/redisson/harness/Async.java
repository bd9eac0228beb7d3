package lock.redisson.harness;

import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * A call made on a thread of its own (a waiting module caller, a Redisson thread that blocks),
 * with the moment it returned, so a test can start several waits in a known order and read
 * their outcomes and their times.
 */
public final class Async<T> {
    private final CompletableFuture<T> result = new CompletableFuture<>();
    private volatile long doneNanos;
    private final Thread thread;

    private Async(String name, Callable<T> call) {
        thread = new Thread(() -> {
            try {
                T value = call.call();
                doneNanos = System.nanoTime();
                result.complete(value);
            } catch (Throwable e) {
                doneNanos = System.nanoTime();
                result.completeExceptionally(e);
            }
        }, name);
        thread.setDaemon(true);
    }

    public static <T> Async<T> start(String name, Callable<T> call) {
        Async<T> async = new Async<>(name, call);
        async.thread.start();
        return async;
    }

    public boolean isDone() {
        return result.isDone();
    }

    /** The value, waiting at most PATIENCE; fails the test on an exception or a timeout. */
    public T get() {
        try {
            return result.get(Processes.PATIENCE.toMillis(), TimeUnit.MILLISECONDS);
        } catch (ExecutionException e) {
            throw new AssertionError(thread.getName() + " failed: " + e.getCause(), e.getCause());
        } catch (TimeoutException e) {
            throw new AssertionError(thread.getName() + " did not return within " + Processes.PATIENCE.toMillis() + " ms");
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new AssertionError("interrupted", e);
        }
    }

    /** The exception the call ended with (fails if it returned). */
    public Throwable failure() {
        try {
            T value = result.get(Processes.PATIENCE.toMillis(), TimeUnit.MILLISECONDS);
            throw new AssertionError(thread.getName() + " returned " + value + ", expected a failure");
        } catch (ExecutionException e) {
            return e.getCause();
        } catch (TimeoutException e) {
            throw new AssertionError(thread.getName() + " did not return within " + Processes.PATIENCE.toMillis() + " ms");
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new AssertionError("interrupted", e);
        }
    }

    /** When the call returned (System.nanoTime), once {@link #get()} has. */
    public long doneNanos() {
        return doneNanos;
    }

    public Thread thread() {
        return thread;
    }
}
