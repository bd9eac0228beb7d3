package lock.redisson.harness;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;

/**
 * A Redisson client in a JVM of its own, to be killed with {@code kill -9} while it holds or
 * waits: its watchdog, its subscriptions and its connections die with it, as in a crashed
 * application. The child says on stdout who it is once connected ({@code OWNER <id>}), takes
 * the lock when told ({@link #go}) and says when it holds ({@code HOLDING}); the test reads
 * those lines as events, and sees a wait on the server (its subscription, its entry in a fair
 * queue).
 *
 * <p>Run as {@code main(url, kind, lockName, leaseMs, watchdogMs, fairWaitMs)}: kind {@code lock}
 * or {@code fair}; leaseMs -1 for the watchdog. Told {@code go} on stdin, it takes the lock
 * (waiting if it must), says {@code HOLDING}, and sleeps until killed.
 */
public final class RedissonProcess implements AutoCloseable {
    private final Process process;
    private final BlockingQueue<String> lines = new LinkedBlockingQueue<>();
    private final List<String> seen = new ArrayList<>();

    private RedissonProcess(Process process) {
        this.process = process;
        Thread reader = new Thread(() -> {
            try (BufferedReader out = new BufferedReader(new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8))) {
                String line;
                while ((line = out.readLine()) != null) {
                    lines.add(line);
                }
            } catch (IOException e) {
                // The child was killed.
            }
        }, "redisson-process-output");
        reader.setDaemon(true);
        reader.start();
    }

    /** Starts a child JVM on this JVM's classpath, taking {@code lockName} on {@code server}. */
    public static RedissonProcess start(Server server, String kind, String lockName, long leaseMs, long watchdogMs, long fairWaitMs) {
        String java = ProcessHandle.current().info().command().orElse("java");
        List<String> cmd = List.of(java, "-cp", System.getProperty("java.class.path"),
                "-Dorg.slf4j.simpleLogger.defaultLogLevel=error",
                RedissonProcess.class.getName(), server.url(), kind, lockName,
                String.valueOf(leaseMs), String.valueOf(watchdogMs), String.valueOf(fairWaitMs));
        try {
            return new RedissonProcess(Processes.track(new ProcessBuilder(cmd)
                    .redirectError(ProcessBuilder.Redirect.INHERIT).start()));
        } catch (IOException e) {
            throw new IllegalStateException("start " + cmd, e);
        }
    }

    /** Tells the child, started and connected ({@code OWNER}), to take the lock. */
    public void go() {
        try {
            process.getOutputStream().write("go\n".getBytes(StandardCharsets.UTF_8));
            process.getOutputStream().flush();
        } catch (IOException e) {
            throw new AssertionError("the Redisson process is gone: " + e.getMessage(), e);
        }
    }

    /** Waits for the child's next line starting with {@code word}; returns the rest of it. */
    public String await(String word) {
        long deadline = System.nanoTime() + Processes.PATIENCE.toNanos();
        try {
            while (true) {
                String line = lines.poll(Math.max(1, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
                if (line == null) {
                    throw new AssertionError("the Redisson process did not say " + word + " within "
                            + Processes.PATIENCE.toMillis() + " ms; it said " + seen + (process.isAlive() ? "" : " and exited " + process.exitValue()));
                }
                seen.add(line);
                if (line.equals(word) || line.startsWith(word + " ")) {
                    return line.substring(word.length()).trim();
                }
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new AssertionError("interrupted", e);
        }
    }

    /** {@code kill -9}: no unlock, no unsubscribe, no last renewal. */
    public void kill() {
        Processes.kill(process);
    }

    @Override
    public void close() {
        kill();
    }

    public static void main(String[] args) throws Exception {
        String url = args[0];
        String kind = args[1];
        String name = args[2];
        long leaseMs = Long.parseLong(args[3]);
        long watchdogMs = Long.parseLong(args[4]);
        long fairWaitMs = Long.parseLong(args[5]);
        RedissonClient redisson = Redissons.single(url, config -> {
            if (watchdogMs > 0) {
                config.setLockWatchdogTimeout(watchdogMs);
            }
            if (fairWaitMs > 0) {
                config.setFairLockWaitTimeout(fairWaitMs);
            }
        });
        RLock lock = kind.equals("fair") ? redisson.getFairLock(name) : redisson.getLock(name);
        System.out.println("OWNER " + redisson.getId() + ":" + Thread.currentThread().getId());
        // Started and connected: the lock is taken when the test says go (a JVM's start takes
        // seconds on a busy machine, a lock() then milliseconds).
        if (!"go".equals(new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)).readLine())) {
            return;
        }
        // Waiting, if it must, as Redisson does: subscribed, retrying on messages and told ttls.
        if (leaseMs > 0) {
            lock.lock(leaseMs, TimeUnit.MILLISECONDS);
        } else {
            lock.lock();
        }
        System.out.println("HOLDING");
        Thread.sleep(Long.MAX_VALUE);
    }
}
