package lock.redisson;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import lock.redisson.harness.Async;
import lock.redisson.harness.Channels;
import lock.redisson.harness.Contenders;
import lock.redisson.harness.ModuleCaller;
import lock.redisson.harness.OnOneServer;
import lock.redisson.harness.Parked;
import lock.redisson.harness.Processes;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;
import org.redisson.api.RCountDownLatch;
import org.redisson.api.RedissonClient;
import redis.clients.jedis.Jedis;
import redis.clients.jedis.JedisPubSub;

/**
 * Redisson's {@code RCountDownLatch} and {@code LATCH.*} callers on the same names: each side
 * reads and counts down the other's latch; a Redisson count-down to zero answers every
 * {@code LATCH.AWAIT ... BLOCK} caller at once; a {@code LATCH.COUNTDOWN} to zero wakes Redisson
 * threads parked on their latch by the message on
 * {@code redisson_countdownlatch__channel__{name}}, long before the wait they were given; and
 * count-downs from both sides at once take the count to zero exactly once, never before the
 * last of them, releasing every awaiter of both kinds.
 */
class LatchTest extends OnOneServer {
    /** Module callers awaiting the latch on this server (0 when it is open). */
    int moduleAwaiters(String key) {
        Map<String, Object> info = look().latchInfo(key);
        return info == null ? 0 : ((Long) info.get("waiters")).intValue();
    }

    @Test
    void eachSideCountsDownTheOthersLatch() throws Exception {
        String key = name("latch");
        RCountDownLatch latch = redisson().getCountDownLatch(key);
        ModuleCaller caller = module();
        assertTrue(latch.trySetCount(3));
        assertEquals(0L, caller.call("LATCH.INIT", key, "5"), "LATCH.INIT found Redisson's latch set");
        Map<String, Object> info = look().latchInfo(key);
        assertEquals(3L, info.get("count"));
        assertEquals(-1L, info.get("ttl"));

        assertEquals(2L, caller.call("LATCH.COUNTDOWN", key));
        assertEquals(2, latch.getCount());
        latch.countDown();
        assertEquals(1L, look().latchInfo(key).get("count"));
        assertNull(caller.call("LATCH.AWAIT", key), "LATCH.AWAIT without BLOCK on a closed latch");
        assertFalse(latch.await(50, TimeUnit.MILLISECONDS));

        assertEquals(0L, caller.call("LATCH.COUNTDOWN", key));
        assertEquals(0, latch.getCount());
        assertNull(look().latchInfo(key), "an open latch is no key");
        assertEquals(0L, caller.call("LATCH.AWAIT", key));
        assertTrue(latch.await(1, TimeUnit.SECONDS));

        // Count-downs past zero, on either side, leave the latch open and nothing behind.
        latch.countDown();
        assertEquals(0L, caller.call("LATCH.COUNTDOWN", key));
        assertEquals(0, latch.getCount());

        // A latch set by the module: Redisson finds it set and counts it down.
        assertEquals(1L, caller.call("LATCH.INIT", key, "2"));
        assertFalse(latch.trySetCount(7));
        assertEquals(2, latch.getCount());
        latch.countDown();
        latch.countDown();
        assertEquals(0L, caller.call("LATCH.AWAIT", key));
        assertNothingLeft();
    }

    @Test
    void aRedissonCountDownOpensTheLatchForModuleAwaitersAtOnce() {
        String key = name("latch");
        RCountDownLatch latch = redisson().getCountDownLatch(key);
        assertTrue(latch.trySetCount(2));
        List<Async<Object>> awaiters = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            ModuleCaller awaiting = module();
            awaiters.add(Async.start("LATCH.AWAIT " + i, () -> awaiting.latchAwait(key, 0)));
        }
        Processes.waitUntil("3 module callers awaiting", () -> moduleAwaiters(key) == 3);

        // One count-down short: they all go on waiting.
        latch.countDown();
        Map<String, Object> info = look().latchInfo(key);
        assertEquals(1L, info.get("count"));
        assertEquals(3L, info.get("waiters"));
        long opened = System.nanoTime();
        latch.countDown();
        // BLOCK 0 never runs out: only the latch opening answers them.
        StringBuilder delays = new StringBuilder();
        for (Async<Object> awaiter : awaiters) {
            assertEquals(0L, awaiter.get());
            delays.append(String.format(" %.2f ms", Processes.msSince(opened, awaiter.doneNanos())));
        }
        System.out.printf("[%s] Redisson countDown to zero -> LATCH.AWAIT BLOCK callers answered:%s%n", key, delays);
        assertNothingLeft();
    }

    @Test
    void aModuleCountDownWakesWaitingRedissonThreadsByTheirMessage() {
        String key = name("latch");
        ModuleCaller caller = module();
        assertEquals(1L, caller.call("LATCH.INIT", key, "2"));
        assertEquals(1L, caller.call("LATCH.COUNTDOWN", key));
        RCountDownLatch first = redisson().getCountDownLatch(key);
        RCountDownLatch second = redisson().getCountDownLatch(key);

        // await() waits with no timeout at all, await(15 s) for 15 s: neither polls the count,
        // so within the bound only the message on the latch's channel wakes them.
        Async<Boolean> awaits = Async.start("redisson await()", () -> {
            first.await();
            return true;
        });
        Async<Boolean> awaitsFor = Async.start("redisson await(15 s)", () -> second.await(15, TimeUnit.SECONDS));
        Processes.waitUntil("both Redisson clients subscribed", () -> server.subscribers(Channels.latch(key)) == 2);
        Parked.waitUntilParked(awaits);
        Parked.waitUntilParked(awaitsFor);

        long opened = System.nanoTime();
        assertEquals(0L, caller.call("LATCH.COUNTDOWN", key));
        assertTrue(awaits.get());
        assertTrue(awaitsFor.get(), "await(15 s) gave up: no message woke it");
        System.out.printf("[%s] LATCH.COUNTDOWN to zero -> waiting Redisson threads return: await() %.2f ms, await(15 s) %.2f ms%n",
                key, Processes.msSince(opened, awaits.doneNanos()), Processes.msSince(opened, awaitsFor.doneNanos()));
        assertNothingLeft();
    }

    /** Who sets the latch's count before both sides count it down. */
    enum SetBy { REDISSON, MODULE }

    @ParameterizedTest
    @EnumSource(SetBy.class)
    void countDownsFromBothSidesOpenTheLatchOnceForEveryAwaiter(SetBy setBy) throws Exception {
        String key = name("latch-" + setBy);
        RedissonClient[] clients = {redisson(), redisson()};
        int threadsPerClient = 2;
        int moduleCallers = 2;
        int cycles = 50;
        int countDowns = (clients.length * threadsPerClient + moduleCallers) * cycles;
        if (setBy == SetBy.REDISSON) {
            assertTrue(clients[0].getCountDownLatch(key).trySetCount(countDowns));
        } else {
            assertEquals(1L, look().call("LATCH.INIT", key, String.valueOf(countDowns)));
        }

        // Everything published on the latch's channel from now on.
        List<String> published = Collections.synchronizedList(new ArrayList<>());
        JedisPubSub listener = new JedisPubSub() {
            @Override
            public void onMessage(String channel, String message) {
                published.add(message);
            }
        };
        Jedis subscriber = server.jedis();
        Async<Void> listening = Async.start("channel listener", () -> {
            subscriber.subscribe(listener, Channels.latch(key));
            return null;
        });

        // Awaiters of both kinds, each noting how many count-downs had been sent when it was released.
        AtomicInteger sent = new AtomicInteger();
        List<Async<Integer>> awaiters = new ArrayList<>();
        for (int c = 0; c < clients.length; c++) {
            RCountDownLatch latch = clients[c].getCountDownLatch(key);
            Async<Integer> awaiter = Async.start("redisson awaiter " + c, () -> {
                assertTrue(latch.await(15, TimeUnit.SECONDS), "await(15 s) gave up");
                return sent.get();
            });
            awaiters.add(awaiter);
        }
        for (int m = 0; m < 3; m++) {
            ModuleCaller awaiting = module();
            awaiters.add(Async.start("module awaiter " + m, () -> {
                assertEquals(0L, awaiting.latchAwait(key, 0));
                return sent.get();
            }));
        }
        Processes.waitUntil("every awaiter waiting", () -> moduleAwaiters(key) == 3
                && server.subscribers(Channels.latch(key)) == clients.length + 1);
        awaiters.subList(0, clients.length).forEach(Parked::waitUntilParked);

        List<Long> moduleCounts = Collections.synchronizedList(new ArrayList<>());
        Contenders contenders = new Contenders();
        for (int c = 0; c < clients.length; c++) {
            RCountDownLatch latch = clients[c].getCountDownLatch(key);
            for (int t = 0; t < threadsPerClient; t++) {
                contenders.add("redisson-" + c + "-" + t, cycles, i -> {
                    sent.incrementAndGet();
                    latch.countDown();
                });
            }
        }
        for (int m = 0; m < moduleCallers; m++) {
            ModuleCaller caller = module();
            contenders.add("module-" + m, cycles, i -> {
                sent.incrementAndGet();
                moduleCounts.add((Long) caller.call("LATCH.COUNTDOWN", key));
            });
        }
        long start = System.nanoTime();
        contenders.start();
        contenders.join(Duration.ofSeconds(30));
        long done = System.nanoTime();

        // Released only once the last count-down had been sent: the count never reached zero early.
        long firstReleased = Long.MAX_VALUE;
        long lastReleased = 0;
        for (Async<Integer> awaiter : awaiters) {
            assertEquals(countDowns, awaiter.get(), awaiter.thread().getName() + " released before the last count-down");
            firstReleased = Math.min(firstReleased, awaiter.doneNanos());
            lastReleased = Math.max(lastReleased, awaiter.doneNanos());
        }
        // Every module count-down saw a count of its own: none was lost or counted twice.
        assertEquals(moduleCallers * cycles, moduleCounts.size());
        assertEquals(moduleCounts.size(), new HashSet<>(moduleCounts).size(), "two LATCH.COUNTDOWN saw the same count: " + moduleCounts);
        assertTrue(moduleCounts.stream().allMatch(n -> n >= 0 && n < countDowns), "counts out of range: " + moduleCounts);
        assertNull(look().latchInfo(key));

        // Zero was published once: a marker sent once Redisson's clients have left the channel
        // comes right after it.
        Processes.waitUntil("Redisson's clients unsubscribed", () -> server.subscribers(Channels.latch(key)) == 1);
        try (Jedis jedis = server.jedis()) {
            jedis.publish(Channels.latch(key), "marker");
        }
        Processes.waitUntil("the marker heard", () -> published.contains("marker"));
        listener.unsubscribe();
        listening.get();
        subscriber.close();
        assertEquals(List.of("0", "marker"), published, "what the latch's channel carried");
        System.out.printf("[%s] %d count-downs (%d Redisson threads in %d clients, %d LATCH.COUNTDOWN callers) in %.0f ms; "
                        + "%d awaiters (%d Redisson, 3 LATCH.AWAIT) all released within %.2f ms of each other%n",
                key, countDowns, clients.length * threadsPerClient, clients.length, moduleCallers, Processes.msSince(start, done),
                awaiters.size(), clients.length, Processes.msSince(firstReleased, lastReleased));
        assertNothingLeft();
    }
}
