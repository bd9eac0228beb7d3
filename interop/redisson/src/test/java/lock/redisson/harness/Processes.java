package lock.redisson.harness;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.BooleanSupplier;
import java.util.function.Supplier;

/**
 * What every test's processes share: free loopback ports, fresh directories, the bound on any
 * wait, and one list of the processes this JVM started (servers, sentinels, child JVMs), each
 * killed by its own PID when the JVM exits, whatever state a failed test left them in.
 */
public final class Processes {
    /** Generous bound for anything a test waits for; reached only on failure. */
    public static final Duration PATIENCE = Duration.ofSeconds(20);

    private static final List<Process> STARTED = new ArrayList<>();
    private static final AtomicInteger NEXT_PORT = new AtomicInteger();
    private static final AtomicInteger NEXT_DIR = new AtomicInteger();

    static {
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            synchronized (STARTED) {
                STARTED.forEach(Process::destroyForcibly);
            }
        }));
    }

    private Processes() {}

    /** Remembers a started process, to be killed at exit if nothing did before. */
    public static Process track(Process process) {
        synchronized (STARTED) {
            STARTED.add(process);
        }
        return process;
    }

    /** Kills {@code process} (SIGKILL) and waits for it to be gone. */
    public static void kill(Process process) {
        process.destroyForcibly();
        try {
            process.waitFor();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        synchronized (STARTED) {
            STARTED.remove(process);
        }
    }

    /**
     * A port nothing listens on, below the kernel's ephemeral range (32768 and up): a port from
     * that range can go to a client's outgoing connection before the server binds it. Each JVM
     * starts at its own place in the range (the Rust suites run beside this one).
     */
    public static int freePort() {
        final int first = 10_000;
        final int span = 22_000;
        long start = ProcessHandle.current().pid() * 997 + 11_000;
        for (int i = 0; i < span; i++) {
            int port = first + (int) ((start + NEXT_PORT.getAndIncrement()) % span);
            // A cluster node also listens on port + 10000.
            if (port + 10_000 >= 32_768) {
                continue;
            }
            if (bindable(port) && bindable(port + 10_000)) {
                return port;
            }
        }
        throw new IllegalStateException("no free port in " + first + ".." + (first + span));
    }

    private static boolean bindable(int port) {
        try (ServerSocket socket = new ServerSocket()) {
            socket.setReuseAddress(false);
            socket.bind(new InetSocketAddress("127.0.0.1", port));
            return true;
        } catch (IOException e) {
            return false;
        }
    }

    /** A new empty directory under the temp dir, named by this JVM and a counter. */
    public static Path freshDir(String what) {
        Path dir = Path.of(System.getProperty("java.io.tmpdir"),
                "lock-redisson-" + ProcessHandle.current().pid() + "-" + what + "-" + NEXT_DIR.getAndIncrement());
        try {
            if (Files.exists(dir)) {
                deleteTree(dir);
            }
            return Files.createDirectories(dir);
        } catch (IOException e) {
            throw new IllegalStateException("create " + dir, e);
        }
    }

    static void deleteTree(Path dir) {
        try (var paths = Files.walk(dir)) {
            paths.sorted(java.util.Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        } catch (IOException e) {
            // Leftover temp files harm nothing.
        }
    }

    /** Polls {@code cond} every 2 ms until it holds; fails with {@code what} after PATIENCE. */
    public static void waitUntil(String what, BooleanSupplier cond) {
        waitUntil(what, PATIENCE, cond);
    }

    public static void waitUntil(String what, Duration bound, BooleanSupplier cond) {
        long deadline = System.nanoTime() + bound.toNanos();
        while (!cond.getAsBoolean()) {
            if (System.nanoTime() > deadline) {
                throw new AssertionError("timed out after " + bound.toMillis() + " ms waiting for: " + what);
            }
            sleep(2);
        }
    }

    /**
     * Polls {@code check}, which answers null once satisfied or else what it still sees, until it
     * is satisfied; fails with the last answer after {@code bound}.
     */
    public static void waitFor(String what, Duration bound, Supplier<String> check) {
        long deadline = System.nanoTime() + bound.toNanos();
        String seen;
        while ((seen = check.get()) != null) {
            if (System.nanoTime() > deadline) {
                throw new AssertionError("timed out after " + bound.toMillis() + " ms waiting for " + what
                        + "; last seen: " + seen);
            }
            sleep(5);
        }
    }

    /** Milliseconds from {@code startNanos} to {@code endNanos} (System.nanoTime). */
    public static double msSince(long startNanos, long endNanos) {
        return (endNanos - startNanos) / 1e6;
    }

    public static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted", e);
        }
    }
}
