package lock.redisson;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import lock.redisson.harness.Async;
import lock.redisson.harness.Channels;
import lock.redisson.harness.Contenders;
import lock.redisson.harness.Guard;
import lock.redisson.harness.ModuleCaller;
import lock.redisson.harness.OnOneServer;
import lock.redisson.harness.Parked;
import lock.redisson.harness.Processes;
import lock.redisson.harness.Redissons;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;
import org.redisson.api.RLock;
import org.redisson.api.RReadWriteLock;
import org.redisson.api.RedissonClient;
import redis.clients.jedis.exceptions.JedisDataException;

/**
 * Redisson's {@code RReadWriteLock} and {@code LOCK.RACQUIRE} / {@code LOCK.WACQUIRE} callers on
 * the same names: each side sees the other's read and write holds (readers of both kinds share,
 * a writer of either kind is alone) and the other's per-hold lease keys; a Redisson unlock serves
 * queued module callers at once (a writer, or the run of readers together), a
 * {@code LOCK.RELEASE} wakes waiting Redisson threads by their message on
 * {@code redisson_rwlock:{name}}, long before the lease they were told to wait for; and under
 * contention of Redisson and module readers and writers no writer ever holds beside anyone.
 */
class ReadWriteLockTest extends OnOneServer {
    /** The lease key of {@code owner}'s n-th read hold, Redisson's layout for a name without a tag. */
    static String leaseKey(String key, String owner, int n) {
        return "{" + key + "}:" + owner + ":rwlock_timeout:" + n;
    }

    /** {@code LOCK.RACQUIRE key owner PX lease} without BLOCK: the read holds, null if refused. */
    static Long racquire(ModuleCaller caller, String key, String owner, long leaseMs) {
        return (Long) caller.call("LOCK.RACQUIRE", key, owner, "PX", String.valueOf(leaseMs));
    }

    /** {@code LOCK.WACQUIRE key owner PX lease} without BLOCK: the write holds, null if refused. */
    static Long wacquire(ModuleCaller caller, String key, String owner, long leaseMs) {
        return (Long) caller.call("LOCK.WACQUIRE", key, owner, "PX", String.valueOf(leaseMs));
    }

    /** The readers {@code LOCK.INFO} lists (a flat array in RESP2), reader -> read holds. */
    Map<String, Long> readers(String key) {
        Map<String, Long> readers = new TreeMap<>();
        if (look().info(key).get("readers") instanceof List<?> flat) {
            for (int i = 0; i + 1 < flat.size(); i += 2) {
                readers.put(new String((byte[]) flat.get(i), StandardCharsets.UTF_8), (Long) flat.get(i + 1));
            }
        }
        return readers;
    }

    long pttl(String key) {
        return look().jedis().pttl(key);
    }

    @Test
    void moduleCallersSeeRedissonReadHoldsAndShareThem() {
        String key = name("rw");
        RedissonClient redisson = redisson();
        RLock read = redisson.getReadWriteLock(key).readLock();
        String me = Redissons.owner(redisson, Thread.currentThread());
        ModuleCaller reader = module();
        ModuleCaller writer = module();

        read.lock(20, TimeUnit.SECONDS);
        read.lock(20, TimeUnit.SECONDS);
        assertEquals("read", look().info(key).get("mode"));
        assertEquals(Map.of(me, 2L), readers(key));
        // A writer is refused at once without BLOCK; a reader shares.
        assertNull(wacquire(writer, key, "m-w", 1_000));
        assertEquals(1L, racquire(reader, key, "m-r", 20_000));
        assertEquals(Map.of(me, 2L, "m-r", 1L), readers(key));
        // Each read hold has its own lease key, Redisson's and the module's alike.
        for (String lease : List.of(leaseKey(key, me, 1), leaseKey(key, me, 2), leaseKey(key, "m-r", 1))) {
            long ttl = pttl(lease);
            assertTrue(ttl > 0 && ttl <= 20_000, lease + " pttl " + ttl);
        }

        // A module reader beside Redisson's cannot upgrade: it would wait for its own read hold.
        JedisDataException upgrade = assertThrows(JedisDataException.class, () -> wacquire(reader, key, "m-r", 1_000));
        assertTrue(upgrade.getMessage().startsWith("DEADLOCK"), upgrade.getMessage());

        read.unlock();
        read.unlock();
        assertEquals(Map.of("m-r", 1L), readers(key));
        assertNull(wacquire(writer, key, "m-w", 1_000));
        assertEquals(0L, reader.release(key, "m-r"));
        assertEquals(1L, wacquire(writer, key, "m-w", 1_000));
        assertEquals(0L, writer.release(key, "m-w"));
        assertNothingLeft();
    }

    @Test
    void redissonSeesModuleReadAndWriteHolds() throws Exception {
        String key = name("rw");
        RReadWriteLock rw = redisson().getReadWriteLock(key);
        ModuleCaller caller = module();

        // A module reader: Redisson's reader shares it, Redisson's writer is refused.
        assertEquals(1L, racquire(caller, key, "m-r", 20_000));
        assertTrue(rw.readLock().isLocked());
        assertFalse(rw.writeLock().isLocked());
        assertFalse(rw.writeLock().tryLock());
        assertFalse(rw.writeLock().tryLock(50, 1_000, TimeUnit.MILLISECONDS));
        assertTrue(rw.readLock().tryLock());
        assertEquals(2, readers(key).size());
        rw.readLock().unlock();
        assertEquals(0L, caller.release(key, "m-r"));
        assertFalse(rw.readLock().isLocked());

        // A module writer: Redisson's reader and writer are both refused and cannot unlock it.
        assertEquals(1L, wacquire(caller, key, "m-w", 20_000));
        assertTrue(rw.writeLock().isLocked());
        // Redisson counts its read lock as locked in write mode only when the hash has more than the
        // mode and the writer's field (the writer's own read holds): the module wrote nothing else.
        assertFalse(rw.readLock().isLocked());
        assertFalse(rw.writeLock().isHeldByCurrentThread());
        long ttl = rw.writeLock().remainTimeToLive();
        assertTrue(ttl > 0 && ttl <= 20_000, "remainTimeToLive " + ttl);
        assertFalse(rw.readLock().tryLock());
        assertFalse(rw.readLock().tryLock(50, 1_000, TimeUnit.MILLISECONDS));
        assertFalse(rw.writeLock().tryLock());
        assertThrows(IllegalMonitorStateException.class, rw.readLock()::unlock);
        assertThrows(IllegalMonitorStateException.class, rw.writeLock()::unlock);

        assertEquals(2L, wacquire(caller, key, "m-w", 20_000));
        assertEquals(1L, caller.release(key, "m-w"));
        assertTrue(rw.writeLock().isLocked());
        assertEquals(0L, caller.release(key, "m-w"));
        assertFalse(rw.writeLock().isLocked());
        assertEquals(-2, rw.writeLock().remainTimeToLive());
        assertNothingLeft();
    }

    @Test
    void moduleCallersSeeARedissonWriterAndItsDowngrade() {
        String key = name("rw");
        RedissonClient redisson = redisson();
        RReadWriteLock rw = redisson.getReadWriteLock(key);
        String me = Redissons.owner(redisson, Thread.currentThread());
        ModuleCaller caller = module();

        rw.writeLock().lock(20, TimeUnit.SECONDS);
        rw.writeLock().lock(20, TimeUnit.SECONDS);
        Map<String, Object> info = look().info(key);
        assertEquals("write", info.get("mode"));
        // Redisson's writer field is <owner>:write; the module names the owner.
        assertEquals(me, info.get("writer"));
        assertEquals(2L, info.get("write_holds"));
        assertNull(racquire(caller, key, "m-r", 1_000));
        assertNull(wacquire(caller, key, "m-w", 1_000));
        JedisDataException notOwner = assertThrows(JedisDataException.class, () -> caller.release(key, "m-w"));
        assertTrue(notOwner.getMessage().startsWith("NOTOWNER"), notOwner.getMessage());

        // The writer takes a read hold and lets its write holds go: it is an ordinary reader now.
        rw.readLock().lock(20, TimeUnit.SECONDS);
        rw.writeLock().unlock();
        assertNull(racquire(caller, key, "m-r", 1_000));
        rw.writeLock().unlock();
        assertEquals("read", look().info(key).get("mode"));
        assertEquals(Map.of(me, 1L), readers(key));
        assertEquals(1L, racquire(caller, key, "m-r", 20_000));
        assertNull(wacquire(caller, key, "m-w", 1_000));
        rw.readLock().unlock();
        assertEquals(0L, caller.release(key, "m-r"));
        assertNothingLeft();
    }

    @Test
    void readLeasesAreSharedBothWays() {
        String key = name("rw");
        RedissonClient redisson = redisson();
        RLock read = redisson.getReadWriteLock(key).readLock();
        ModuleCaller reader = module();

        // Redisson's read unlock sets the hash's TTL from the module reader's lease key.
        read.lock(60, TimeUnit.SECONDS);
        assertEquals(1L, racquire(reader, key, "m-r", 10_000));
        assertTrue(pttl(key) > 10_000, "the hash lives until Redisson's 60 s lease: " + pttl(key));
        read.unlock();
        long ttl = pttl(key);
        assertTrue(ttl > 0 && ttl <= 10_000, "after Redisson's unlock the hash follows the module's lease: " + ttl);
        assertEquals(0L, reader.release(key, "m-r"));
        assertNothingLeft();

        // The module's read release sets it from Redisson's lease key.
        read.lock(10, TimeUnit.SECONDS);
        assertEquals(1L, racquire(reader, key, "m-r", 60_000));
        assertTrue(pttl(key) > 10_000, "the hash lives until the module's 60 s lease: " + pttl(key));
        assertEquals(0L, reader.release(key, "m-r"));
        ttl = pttl(key);
        assertTrue(ttl > 0 && ttl <= 10_000, "after LOCK.RELEASE the hash follows Redisson's lease: " + ttl);
        read.unlock();
        assertNothingLeft();
    }

    @Test
    void aRedissonReadUnlockServesAQueuedModuleWriterAtOnce() {
        String key = name("rw");
        RLock read = redisson().getReadWriteLock(key).readLock();
        ModuleCaller waiting = module();
        ModuleCaller later = module();
        read.lock(60, TimeUnit.SECONDS);

        Async<Long> writer = Async.start("module writer", () -> waiting.wacquireWaiting(key, "m-w", 10_000, 0));
        waitForModuleWaiters(key, 1);
        // Behind a waiting writer, a module reader is not let in beside Redisson's reader.
        assertNull(racquire(later, key, "m-r", 1_000));
        long unlocked = System.nanoTime();
        read.unlock();
        // Served long before the 60 s lease Redisson took would have ended.
        assertEquals(1L, writer.get());
        System.out.printf("[%s] Redisson read unlock -> LOCK.WACQUIRE BLOCK caller answered: %.2f ms%n",
                key, Processes.msSince(unlocked, writer.doneNanos()));
        assertEquals("m-w", look().info(key).get("writer"));
        assertFalse(read.tryLock());
        assertEquals(0L, waiting.release(key, "m-w"));
        assertNothingLeft();
    }

    @Test
    void aRedissonWriteUnlockServesTheQueuedModuleReadersTogether() {
        String key = name("rw");
        RLock write = redisson().getReadWriteLock(key).writeLock();
        ModuleCaller first = module();
        ModuleCaller second = module();
        write.lock(60, TimeUnit.SECONDS);

        Async<Long> reader1 = Async.start("module reader 1", () -> first.racquireWaiting(key, "m-r1", 10_000, 0));
        waitForModuleWaiters(key, 1);
        Async<Long> reader2 = Async.start("module reader 2", () -> second.racquireWaiting(key, "m-r2", 10_000, 0));
        waitForModuleWaiters(key, 2);
        long unlocked = System.nanoTime();
        write.unlock();
        assertEquals(1L, reader1.get());
        assertEquals(1L, reader2.get());
        System.out.printf("[%s] Redisson write unlock -> 2 LOCK.RACQUIRE BLOCK callers answered: %.2f ms, %.2f ms%n",
                key, Processes.msSince(unlocked, reader1.doneNanos()), Processes.msSince(unlocked, reader2.doneNanos()));
        assertEquals(Map.of("m-r1", 1L, "m-r2", 1L), readers(key));
        assertFalse(write.tryLock());
        assertEquals(0L, first.release(key, "m-r1"));
        assertEquals(0L, second.release(key, "m-r2"));
        assertNothingLeft();
    }

    @Test
    void aModuleWriteReleaseWakesWaitingRedissonReadersByTheirMessage() {
        String key = name("rw");
        RedissonClient[] clients = {redisson(), redisson()};
        ModuleCaller holder = module();
        assertEquals(1L, wacquire(holder, key, "m-w", 60_000));

        // A reader in each client: each client has its own subscription, so both are seen waiting.
        List<Async<Boolean>> waiters = new ArrayList<>();
        for (int c = 0; c < clients.length; c++) {
            RLock read = clients[c].getReadWriteLock(key).readLock();
            waiters.add(Async.start("redisson reader " + c, () -> {
                read.lock();
                return read.isHeldByCurrentThread();
            }));
            int subscribed = c + 1;
            Processes.waitUntil(subscribed + " Redisson clients subscribed", () -> server.subscribers(Channels.readWrite(key)) == subscribed);
        }
        // The write release's 1 wakes only the threads parked on their latch (Parked).
        waiters.forEach(Parked::waitUntilParked);
        long released = System.nanoTime();
        assertEquals(0L, holder.release(key, "m-w"));
        // Told to retry when the 60 s lease ends: only the message wakes them sooner.
        assertTrue(waiters.get(0).get());
        assertTrue(waiters.get(1).get());
        System.out.printf("[%s] LOCK.RELEASE (write) -> waiting Redisson readers in 2 clients have the lock: %.2f ms, %.2f ms%n",
                key, Processes.msSince(released, waiters.get(0).doneNanos()), Processes.msSince(released, waiters.get(1).doneNanos()));
        // Both hold it at once, and a module writer waits for both.
        assertEquals(Map.of(Redissons.owner(clients[0], waiters.get(0).thread()), 1L, Redissons.owner(clients[1], waiters.get(1).thread()), 1L),
                readers(key));
        assertNull(wacquire(holder, key, "m-w", 1_000));
        for (int c = 0; c < clients.length; c++) {
            clients[c].getReadWriteLock(key).readLock().unlockAsync(waiters.get(c).thread().getId()).toCompletableFuture().join();
        }
        assertNothingLeft();
    }

    @Test
    void aModuleWriteReleaseHandedToModuleReadersWakesAWaitingRedissonReader() {
        String key = name("rw");
        RedissonClient redisson = redisson();
        RLock read = redisson.getReadWriteLock(key).readLock();
        ModuleCaller holder = module();
        ModuleCaller queued = module();
        assertEquals(1L, wacquire(holder, key, "m-w", 60_000));
        Async<Boolean> waiter = Async.start("redisson reader", () -> read.tryLock(15, 60, TimeUnit.SECONDS));
        Processes.waitUntil("the Redisson client subscribed", () -> server.subscribers(Channels.readWrite(key)) == 1);
        // The message (1) wakes only a thread parked on its latch (Parked).
        Parked.waitUntilParked(waiter);
        Async<Long> moduleReader = Async.start("module reader", () -> queued.racquireWaiting(key, "m-r", 60_000, 0));
        waitForModuleWaiters(key, 1);

        // The lock goes straight to the queued module reader, never free: the release tells
        // Redisson's readers (1, as Redisson's write unlock does) that it can be shared now.
        long released = System.nanoTime();
        assertEquals(0L, holder.release(key, "m-w"));
        assertEquals(1L, moduleReader.get());
        // Its wait is 15 s, the write hold's lease 60 s: only the message lets it in.
        assertTrue(waiter.get(), "the Redisson reader was not told the lock could be shared");
        System.out.printf("[%s] LOCK.RELEASE (write) handed to a module reader -> waiting Redisson reader shares it: %.2f ms%n",
                key, Processes.msSince(released, waiter.doneNanos()));
        assertEquals(Map.of("m-r", 1L, Redissons.owner(redisson, waiter.thread()), 1L), readers(key));
        read.unlockAsync(waiter.thread().getId()).toCompletableFuture().join();
        assertEquals(0L, queued.release(key, "m-r"));
        assertNothingLeft();
    }

    @Test
    void aModuleReadReleaseWakesAWaitingRedissonWriterByItsMessage() {
        String key = name("rw");
        RedissonClient redisson = redisson();
        RLock write = redisson.getReadWriteLock(key).writeLock();
        ModuleCaller holder = module();
        assertEquals(1L, racquire(holder, key, "m-r", 60_000));

        Async<Boolean> waiter = Async.start("redisson writer", () -> {
            write.lock();
            return write.isHeldByCurrentThread();
        });
        Processes.waitUntil("the Redisson client subscribed", () -> server.subscribers(Channels.readWrite(key)) == 1);
        Parked.waitUntilParked(waiter);
        long released = System.nanoTime();
        assertEquals(0L, holder.release(key, "m-r"));
        // Told to retry when the 60 s lease ends: only the message wakes it sooner.
        assertTrue(waiter.get());
        System.out.printf("[%s] LOCK.RELEASE (read) -> waiting Redisson writer has the lock: %.2f ms%n",
                key, Processes.msSince(released, waiter.doneNanos()));
        assertEquals(Redissons.owner(redisson, waiter.thread()), look().info(key).get("writer"));
        assertNull(racquire(holder, key, "m-r", 1_000));
        write.unlockAsync(waiter.thread().getId()).toCompletableFuture().join();
        assertNothingLeft();
    }

    /** Who takes the write lock first, and holds it until the other side's contenders all wait. */
    enum First { REDISSON, MODULE }

    @ParameterizedTest
    @EnumSource(First.class)
    void redissonAndModuleReadersAndWritersNeverBreachTheLock(First first) {
        String key = name("rw-" + first);
        Guard guard = Guard.exclusive();
        // Short leases (the watchdog's and the module callers'): a Redisson thread that misses a
        // write release's 1 (it wakes only threads already parked, see Parked) retries when the
        // lease it was told ends, or at the next message.
        long leaseMs = 5_000;
        RedissonClient[] clients = {redisson(c -> c.setLockWatchdogTimeout(leaseMs)), redisson(c -> c.setLockWatchdogTimeout(leaseMs))};
        int readersPerClient = 2;
        int writersPerClient = 2;
        int moduleReaders = 2;
        int moduleWriters = 2;
        int cycles = 30;
        // Readers inside at once, to show that the readers of both kinds did share the lock.
        AtomicInteger reading = new AtomicInteger();
        AtomicInteger mostReading = new AtomicInteger();
        Runnable readBody = () -> {
            mostReading.accumulateAndGet(reading.incrementAndGet(), Math::max);
            Processes.sleep(1);
            reading.decrementAndGet();
        };

        // The first side's writer.
        RLock firstRedisson = clients[0].getReadWriteLock(key).writeLock();
        ModuleCaller firstModule = module();
        if (first == First.REDISSON) {
            firstRedisson.lock();
        } else {
            assertEquals(1L, wacquire(firstModule, key, "first", 30_000));
        }

        Contenders contenders = new Contenders();
        for (int c = 0; c < clients.length; c++) {
            RReadWriteLock rw = clients[c].getReadWriteLock(key);
            for (int t = 0; t < readersPerClient; t++) {
                String who = "redisson-reader-" + c + "-" + t;
                RLock read = rw.readLock();
                contenders.add(who, cycles, i -> {
                    read.lock();
                    try {
                        guard.read(who, readBody::run);
                    } finally {
                        read.unlock();
                    }
                });
            }
            for (int t = 0; t < writersPerClient; t++) {
                String who = "redisson-writer-" + c + "-" + t;
                RLock write = rw.writeLock();
                contenders.add(who, cycles, i -> {
                    write.lock();
                    try {
                        guard.hold(who, () -> Processes.sleep(1));
                    } finally {
                        write.unlock();
                    }
                });
            }
        }
        for (int m = 0; m < moduleReaders; m++) {
            String who = "module-reader-" + m;
            ModuleCaller caller = module();
            contenders.add(who, cycles, i -> {
                assertEquals(1L, caller.racquireWaiting(key, who, leaseMs, 0));
                guard.read(who, readBody::run);
                assertEquals(0L, caller.release(key, who, "READ"));
            });
        }
        for (int m = 0; m < moduleWriters; m++) {
            String who = "module-writer-" + m;
            ModuleCaller caller = module();
            contenders.add(who, cycles, i -> {
                assertEquals(1L, caller.wacquireWaiting(key, who, leaseMs, 0));
                guard.hold(who, () -> Processes.sleep(1));
                assertEquals(0L, caller.release(key, who, "WRITE"));
            });
        }
        long start = System.nanoTime();
        contenders.start();
        Processes.waitUntil("every contender waiting", () -> look().waiters(key) == moduleReaders + moduleWriters
                && server.subscribers(Channels.readWrite(key)) == clients.length);
        if (first == First.REDISSON) {
            firstRedisson.unlock();
        } else {
            assertEquals(0L, firstModule.release(key, "first"));
        }
        contenders.join(Duration.ofSeconds(60));

        guard.assertNoBreach();
        int redissonThreads = clients.length * (readersPerClient + writersPerClient);
        int holds = (redissonThreads + moduleReaders + moduleWriters) * cycles;
        assertEquals(holds, guard.entries());
        System.out.printf("[%s] %d holds (%d Redisson readers and writers in %d clients, %d module readers, %d module writers) in %.0f ms, no writer beside anyone, up to %d readers at once%n",
                key, holds, redissonThreads, clients.length, moduleReaders, moduleWriters, Processes.msSince(start, System.nanoTime()), mostReading.get());
        assertNothingLeft();
    }
}
