package lock.redisson.bench;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicLongArray;

import io.netty.channel.EventLoopGroup;
import io.netty.channel.nio.NioEventLoopGroup;
import org.redisson.Redisson;
import org.redisson.api.RCountDownLatch;
import org.redisson.api.RLock;
import org.redisson.api.RPermitExpirableSemaphore;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;

/**
 * The real Redisson client as a load for {@code make bench} (lock-bench's S2, S12 and S13 rows
 * "redisson"): lock-bench starts this JVM once, pinned to the generator's core, and sends it one
 * run per line on stdin; the driver answers on stdout with {@code measuring} when its measured
 * window opens, {@code measured} when it closes (lock-bench reads the server's CPU and
 * commandstats at those two lines) and {@code result <json>}. One JVM for all runs keeps its JIT
 * warm (each run also has its own warm-up).
 *
 * <p>Runs ({@code name=value} words after the run's kind):
 * <ul>
 * <li>{@code hot-lock port key clients per-process warmup-ms measure-ms lease-ms}: each client
 *     thread loops {@code RLock.lock(lease)} / {@code unlock()} on one key, an empty critical
 *     section;</li>
 * <li>{@code semaphore port key clients per-process permits warmup-ms measure-ms lease-ms}:
 *     {@code RPermitExpirableSemaphore.acquire(lease)} / {@code release(id)}, permits set once
 *     with {@code trySetPermits};</li>
 * <li>{@code latch port key waiters per-process}: {@code trySetCount(1)}, every waiter thread in
 *     {@code await()}, then one {@code countDown()}: the time until each waiter returned.</li>
 * </ul>
 * Clients are grouped into Redisson instances of {@code per-process} threads, each its own
 * "process" as Redisson sees it (its own id, connections, subscriptions); the instances share
 * one Netty event loop group and executor, as threads of one JVM on one core would anyway.
 * Redisson's defaults otherwise.
 */
public final class LoadDriver {
    private final EventLoopGroup eventLoop = new NioEventLoopGroup();
    private final ExecutorService executor = Executors.newCachedThreadPool();

    public static void main(String[] args) throws Exception {
        LoadDriver driver = new LoadDriver();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            line = line.trim();
            if (line.isEmpty()) {
                continue;
            }
            if (line.equals("quit")) {
                break;
            }
            String[] words = line.split("\\s+");
            Map<String, String> opts = new HashMap<>();
            for (String word : Arrays.copyOfRange(words, 1, words.length)) {
                int eq = word.indexOf('=');
                opts.put(word.substring(0, eq), word.substring(eq + 1));
            }
            try {
                String result = switch (words[0]) {
                    case "hot-lock" -> driver.loop(opts, false);
                    case "semaphore" -> driver.loop(opts, true);
                    case "latch" -> driver.latch(opts);
                    default -> throw new IllegalArgumentException("unknown run " + words[0]);
                };
                say("result " + result);
            } catch (Exception e) {
                say("error " + e.toString().replace('\n', ' '));
            }
        }
        driver.eventLoop.shutdownGracefully(0, 1, TimeUnit.SECONDS);
        driver.executor.shutdownNow();
        System.exit(0);
    }

    private static synchronized void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    private List<RedissonClient> clients(int port, int count) {
        List<RedissonClient> clients = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            Config config = new Config();
            config.setEventLoopGroup(eventLoop);
            config.setExecutor(executor);
            config.useSingleServer().setAddress("redis://127.0.0.1:" + port);
            clients.add(Redisson.create(config));
        }
        return clients;
    }

    private static void shutdown(List<RedissonClient> clients) {
        clients.forEach(c -> c.shutdown(0, 5, TimeUnit.SECONDS));
    }

    private static int processes(int clients, int perProcess) {
        return (clients + perProcess - 1) / perProcess;
    }

    /** Phases of a throughput run. */
    private static final int WARMUP = 0;
    private static final int MEASURE = 1;
    private static final int DRAIN = 2;

    /** A hot lock, or a semaphore of {@code permits}: each thread acquires and releases in a loop. */
    private String loop(Map<String, String> opts, boolean semaphore) throws Exception {
        int port = Integer.parseInt(opts.get("port"));
        String key = opts.get("key");
        int n = Integer.parseInt(opts.get("clients"));
        int perProcess = Integer.parseInt(opts.get("per-process"));
        long warmupMs = Long.parseLong(opts.get("warmup-ms"));
        long measureMs = Long.parseLong(opts.get("measure-ms"));
        long leaseMs = Long.parseLong(opts.get("lease-ms"));
        int permits = semaphore ? Integer.parseInt(opts.get("permits")) : 1;

        List<RedissonClient> clients = clients(port, processes(n, perProcess));
        if (semaphore && !clients.get(0).getPermitExpirableSemaphore(key).trySetPermits(permits)) {
            throw new IllegalStateException("trySetPermits(" + permits + ") found " + key + " set");
        }
        AtomicInteger phase = new AtomicInteger(WARMUP);
        AtomicInteger holders = new AtomicInteger();
        AtomicLong violations = new AtomicLong();
        // Grants of every phase: one unlock script each, which tells the acquire scripts apart
        // from the unlock scripts in the server's commandstats.
        AtomicLong grants = new AtomicLong();
        List<String> errors = new ArrayList<>();
        long[] counts = new long[n];
        long[][] waits = new long[n][];
        int[] waitCount = new int[n];
        AtomicLongArray waitingSince = new AtomicLongArray(n);
        Thread[] threads = new Thread[n];
        for (int i = 0; i < n; i++) {
            int me = i;
            RedissonClient client = clients.get(i / perProcess);
            RLock lock = semaphore ? null : client.getLock(key);
            RPermitExpirableSemaphore sem = semaphore ? client.getPermitExpirableSemaphore(key) : null;
            waits[i] = new long[1024];
            threads[i] = new Thread(() -> {
                try {
                    while (phase.get() != DRAIN) {
                        long start = System.nanoTime();
                        waitingSince.set(me, start);
                        String permit = null;
                        if (semaphore) {
                            permit = sem.acquire(leaseMs, TimeUnit.MILLISECONDS);
                        } else {
                            lock.lock(leaseMs, TimeUnit.MILLISECONDS);
                        }
                        long granted = System.nanoTime();
                        waitingSince.set(me, 0);
                        grants.incrementAndGet();
                        if (holders.incrementAndGet() > permits) {
                            violations.incrementAndGet();
                        }
                        if (phase.get() == MEASURE) {
                            counts[me]++;
                            if (waitCount[me] == waits[me].length) {
                                waits[me] = Arrays.copyOf(waits[me], waits[me].length * 2);
                            }
                            waits[me][waitCount[me]++] = granted - start;
                        }
                        holders.decrementAndGet();
                        if (semaphore) {
                            sem.release(permit);
                        } else {
                            lock.unlock();
                        }
                    }
                } catch (Exception e) {
                    synchronized (errors) {
                        if (errors.size() < 20) {
                            errors.add(e.toString());
                        }
                    }
                }
            }, "client-" + i);
        }
        for (Thread t : threads) {
            t.start();
        }
        Thread.sleep(warmupMs);
        phase.set(MEASURE);
        long windowStart = System.nanoTime();
        say("measuring");
        Thread.sleep(measureMs);
        phase.set(DRAIN);
        long windowEnd = System.nanoTime();
        say("measured");
        // Waits still open when the window closed count with their length so far.
        int open = 0;
        List<Long> all = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            long since = waitingSince.get(i);
            if (since != 0) {
                open++;
                all.add(windowEnd - Math.max(since, windowStart));
            }
        }
        for (Thread t : threads) {
            t.join(30_000);
            if (t.isAlive()) {
                errors.add(t.getName() + " still waiting 30 s after the window");
            }
        }
        for (int i = 0; i < n; i++) {
            for (int j = 0; j < waitCount[i]; j++) {
                all.add(waits[i][j]);
            }
        }
        long acquisitions = Arrays.stream(counts).sum();
        double seconds = (windowEnd - windowStart) / 1e9;
        if (semaphore) {
            int available = clients.get(0).getPermitExpirableSemaphore(key).availablePermits();
            if (available != permits) {
                errors.add("after the run " + available + " permits available, not " + permits);
            }
            clients.get(0).getPermitExpirableSemaphore(key).delete();
        } else if (clients.get(0).getLock(key).isLocked()) {
            errors.add("the lock is still held after the run");
        }
        shutdown(clients);
        return "{" + field("clients", n) + "," + field("processes", processes(n, perProcess))
                + "," + field("measured_s", seconds) + "," + field("acquisitions", acquisitions)
                + "," + field("rate_per_s", acquisitions / seconds) + ",\"wait_ms\":" + percentiles(all)
                + "," + field("jain", jain(counts)) + ",\"per_client\":" + Arrays.toString(counts)
                + "," + field("open_waits", open) + "," + field("violations", violations.get())
                + "," + field("grants_all_phases", grants.get())
                + ",\"errors\":" + strings(errors) + "}";
    }

    /** A latch of one count, {@code waiters} threads in await(), one countDown(). */
    private String latch(Map<String, String> opts) throws Exception {
        int port = Integer.parseInt(opts.get("port"));
        String key = opts.get("key");
        int waiters = Integer.parseInt(opts.get("waiters"));
        int perProcess = Integer.parseInt(opts.get("per-process"));
        int processes = processes(waiters, perProcess);
        List<RedissonClient> clients = clients(port, processes + 1);
        RedissonClient counter = clients.get(processes);
        RCountDownLatch latch = counter.getCountDownLatch(key);
        if (!latch.trySetCount(1)) {
            throw new IllegalStateException("trySetCount(1) found " + key + " set");
        }
        long[] done = new long[waiters];
        List<String> errors = new ArrayList<>();
        CountDownLatch arrived = new CountDownLatch(waiters);
        Thread[] threads = new Thread[waiters];
        for (int i = 0; i < waiters; i++) {
            int me = i;
            RCountDownLatch mine = clients.get(i / perProcess).getCountDownLatch(key);
            threads[i] = new Thread(() -> {
                try {
                    arrived.countDown();
                    if (!mine.await(60, TimeUnit.SECONDS)) {
                        throw new IllegalStateException("await() ran out");
                    }
                    done[me] = System.nanoTime();
                } catch (Exception e) {
                    synchronized (errors) {
                        if (errors.size() < 20) {
                            errors.add(e.toString());
                        }
                    }
                }
            }, "waiter-" + i);
            threads[i].start();
        }
        arrived.await();
        // Every instance subscribed (its waiters then read the count and wait for the message).
        String channel = "redisson_countdownlatch__channel__{" + key + "}";
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (counter.getTopic(channel).countSubscribers() < processes) {
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("waiters not subscribed after 30 s");
            }
            Thread.sleep(5);
        }
        // And every waiter parked on its latch (Redisson's ReclosableLatch), where the message
        // finds it: the count-down then times the wake-up, not the waiters' own start.
        while (!Arrays.stream(threads).allMatch(LoadDriver::parkedOnLatch)) {
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("waiters not all parked on their latch after 30 s");
            }
            Thread.sleep(5);
        }
        say("counting-down");
        long start = System.nanoTime();
        latch.countDown();
        long countedDown = System.nanoTime();
        for (Thread t : threads) {
            t.join(60_000);
        }
        List<Long> times = new ArrayList<>();
        for (long d : done) {
            if (d != 0) {
                times.add(d - start);
            }
        }
        shutdown(clients);
        return "{" + field("waiters", waiters) + "," + field("processes", processes) + ","
                + field("released", times.size()) + "," + field("count_down_ms", (countedDown - start) / 1e6)
                + ",\"released_ms\":" + percentiles(times) + ",\"errors\":" + strings(errors) + "}";
    }

    /** Parked (the top frame) inside Redisson's latch wait. */
    private static boolean parkedOnLatch(Thread thread) {
        StackTraceElement[] stack = thread.getStackTrace();
        return stack.length > 0 && stack[0].getMethodName().startsWith("park")
                && Arrays.stream(stack).anyMatch(f -> f.getClassName().equals("org.redisson.misc.ReclosableLatch"));
    }

    private static String percentiles(List<Long> nanos) {
        if (nanos.isEmpty()) {
            return "{\"count\":0}";
        }
        long[] sorted = nanos.stream().mapToLong(Long::longValue).sorted().toArray();
        return "{" + field("count", sorted.length) + "," + field("min", sorted[0] / 1e6) + ","
                + field("p50", at(sorted, 0.50)) + "," + field("p99", at(sorted, 0.99)) + ","
                + field("p999", at(sorted, 0.999)) + "," + field("max", sorted[sorted.length - 1] / 1e6) + "}";
    }

    /** The value at quantile {@code q} (nearest rank), in ms. */
    private static double at(long[] sorted, double q) {
        int rank = (int) Math.ceil(q * sorted.length);
        return sorted[Math.max(0, Math.min(sorted.length - 1, rank - 1))] / 1e6;
    }

    /** Jain's index: (sum x)^2 / (n * sum x^2). */
    private static double jain(long[] counts) {
        double sum = 0;
        double squares = 0;
        for (long c : counts) {
            sum += c;
            squares += (double) c * c;
        }
        return squares == 0 ? 0 : sum * sum / (counts.length * squares);
    }

    private static String field(String name, double value) {
        return "\"" + name + "\":" + (Double.isFinite(value) ? value : 0);
    }

    private static String field(String name, long value) {
        return "\"" + name + "\":" + value;
    }

    private static String strings(List<String> items) {
        StringBuilder json = new StringBuilder("[");
        for (int i = 0; i < items.size(); i++) {
            json.append(i == 0 ? "" : ",").append('"')
                    .append(items.get(i).replace("\\", "\\\\").replace("\"", "\\\"")).append('"');
        }
        return json.append(']').toString();
    }
}
