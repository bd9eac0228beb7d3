package lock.redisson;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import lock.redisson.harness.Async;
import lock.redisson.harness.Channels;
import lock.redisson.harness.Cluster;
import lock.redisson.harness.CommandStats;
import lock.redisson.harness.Contenders;
import lock.redisson.harness.Guard;
import lock.redisson.harness.ModuleCaller;
import lock.redisson.harness.PerTestClients;
import lock.redisson.harness.Processes;
import lock.redisson.harness.Redissons;
import lock.redisson.harness.Server;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;

/**
 * Redisson in cluster mode and {@code LOCK.*} callers on names spread over the three masters of
 * a real Redis Cluster (no replicas), each name's module callers connected to the node serving
 * its slot. On Redis 7+ and Valkey Redisson finds sharded pub/sub supported ({@code PUBSUB
 * SHARDNUMSUB} answers) and waits with {@code SSUBSCRIBE}, its unlock script publishing with
 * {@code SPUBLISH} (counted here in {@code INFO commandstats}); the module publishes its release
 * message on the same shard channel. So on every node a Redisson unlock serves a queued {@code
 * LOCK.ACQUIRE ... BLOCK} caller at once, a {@code LOCK.RELEASE} wakes a waiting Redisson thread
 * by its sharded message long before the lease it was told to wait for, and under contention on
 * a name per node no two hold at once. Nothing is left on any node: no key, no (shard) channel
 * subscribed, no module queue.
 *
 * <p>Redisson's lock scripts go through {@code syncedEval}, which follows a script with {@code
 * WAIT n} when the master has {@code n > 0} replicas (its {@code INFO} says so). These masters
 * have none: a client's first calls send {@code WAIT 0 0} (and {@code WAITAOF 0 0 0}) to learn
 * whether the servers know the commands, then its scripts go without {@code WAIT}; the contention
 * test prints the counts. (SentinelFailoverTest has Redisson's {@code WAIT} at work.)
 */
class ClusterTest extends PerTestClients {
    private static Cluster cluster;

    @BeforeAll
    static void startCluster() {
        cluster = Cluster.start(3);
    }

    @AfterAll
    static void stopCluster() {
        if (cluster != null) {
            cluster.close();
        }
    }

    @BeforeEach
    void emptyCluster() {
        cluster.flushAll();
    }

    /** A name of this test's own whose slot node {@code i} serves: {@code <test>:<what>-<n>}. */
    private String nameOn(int i, String what) {
        return cluster.nameOn(i, name(what) + "-");
    }

    /** A Redisson cluster client with its defaults (it discovers the nodes from the first). */
    private RedissonClient redisson() {
        return keep(Redissons.cluster(cluster.nodes().subList(0, 1), c -> {}));
    }

    /** Callers the module has queued for {@code key} on {@code node}. */
    private static int moduleWaiters(Server node, String key) {
        try (ModuleCaller look = new ModuleCaller(node)) {
            return look.waiters(key);
        }
    }

    @Test
    void aRedissonUnlockServesAQueuedModuleCallerOnEveryNode() {
        RedissonClient redisson = redisson();
        for (int i = 0; i < cluster.nodes().size(); i++) {
            String key = nameOn(i, "lock");
            Server node = cluster.nodeFor(key);
            RLock lock = redisson.getLock(key);
            ModuleCaller waiting = moduleOn(node);
            lock.lock(60, TimeUnit.SECONDS);

            Async<Long> waiter = Async.start("module waiter", () -> waiting.acquireWaiting(key, "m1", 10_000, 0));
            Processes.waitUntil("the module caller queued on " + node, () -> moduleWaiters(node, key) == 1);
            long spublished = CommandStats.calls(node, "spublish");
            long published = CommandStats.calls(node, "publish");
            long unlocked = System.nanoTime();
            lock.unlock();
            // Served long before the 60 s lease Redisson took would have ended.
            assertEquals(1L, waiter.get());
            System.out.printf("[%s] Redisson unlock on node %d (%s) -> LOCK.ACQUIRE BLOCK caller answered: %.2f ms%n",
                    key, i, node.address(), Processes.msSince(unlocked, waiter.doneNanos()));
            // Redisson's unlock script published its message sharded, on the key's node.
            assertEquals(1, CommandStats.calls(node, "spublish") - spublished, "SPUBLISH calls by the unlock");
            assertEquals(0, CommandStats.calls(node, "publish") - published, "PUBLISH calls by the unlock");
            assertEquals("m1", waiting.info(key).get("owner"));
            assertEquals(0L, waiting.release(key, "m1"));
        }
        cluster.assertNothingLeft();
    }

    @Test
    void aModuleReleaseWakesAWaitingRedissonThreadByItsShardedMessageOnEveryNode() {
        RedissonClient redisson = redisson();
        for (int i = 0; i < cluster.nodes().size(); i++) {
            String key = nameOn(i, "lock");
            String channel = Channels.lock(key);
            Server node = cluster.nodeFor(key);
            RLock lock = redisson.getLock(key);
            ModuleCaller holder = moduleOn(node);
            assertEquals(1L, holder.acquire(key, "m1", 60_000));

            Async<Boolean> waiter = Async.start("redisson waiter", () -> {
                lock.lock();
                return lock.isHeldByCurrentThread();
            });
            Processes.waitUntil("the Redisson client subscribed to the shard channel on " + node,
                    () -> node.shardSubscribers(channel) == 1);
            assertEquals(0, node.subscribers(channel), "a classic (unsharded) subscription");
            long released = System.nanoTime();
            assertEquals(0L, holder.release(key, "m1"));
            // Redisson was told to retry when the 60 s lease ends: only the message wakes it sooner.
            assertTrue(waiter.get());
            System.out.printf("[%s] LOCK.RELEASE on node %d (%s) -> waiting Redisson thread has the lock: %.2f ms%n",
                    key, i, node.address(), Processes.msSince(released, waiter.doneNanos()));
            lock.unlockAsync(waiter.thread().getId()).toCompletableFuture().join();
        }
        cluster.assertNothingLeft();
    }

    @Test
    void redissonThreadsAndModuleCallersNeverHoldTogetherOnAnyNode() {
        RedissonClient[] clients = {redisson(), redisson()};
        int threadsPerClient = 2;
        int moduleCallers = 2;
        int cycles = 10;
        int nodes = cluster.nodes().size();
        Map<String, Guard> guards = new LinkedHashMap<>();
        Map<String, Long> waits = new LinkedHashMap<>();
        Map<String, Long> waitaofs = new LinkedHashMap<>();
        Map<String, Long> scripts = new LinkedHashMap<>();
        for (Server node : cluster.nodes()) {
            waits.put(node.address(), CommandStats.calls(node, "wait"));
            waitaofs.put(node.address(), CommandStats.calls(node, "waitaof"));
            scripts.put(node.address(), CommandStats.calls(node, "evalsha") + CommandStats.calls(node, "eval"));
        }

        Contenders contenders = new Contenders();
        Map<String, ModuleCaller> firsts = new LinkedHashMap<>();
        for (int n = 0; n < nodes; n++) {
            String key = nameOn(n, "lock");
            Server node = cluster.nodeFor(key);
            Guard guard = Guard.exclusive();
            guards.put(key, guard);
            // A module caller holds each name until every contender of it waits.
            ModuleCaller first = moduleOn(node);
            assertEquals(1L, first.acquire(key, "first", 30_000));
            firsts.put(key, first);
            for (int c = 0; c < clients.length; c++) {
                RLock lock = clients[c].getLock(key);
                for (int t = 0; t < threadsPerClient; t++) {
                    String who = "node" + n + "-redisson-" + c + "-" + t;
                    contenders.addRedisson(who, cycles, lock, guard);
                }
            }
            for (int m = 0; m < moduleCallers; m++) {
                String who = "node" + n + "-module-" + m;
                ModuleCaller caller = moduleOn(node);
                contenders.addModule(who, cycles, caller, key, 30_000, guard);
            }
        }
        long start = System.nanoTime();
        contenders.start();
        for (String key : guards.keySet()) {
            Server node = cluster.nodeFor(key);
            Processes.waitUntil("every contender of " + key + " waiting", () -> moduleWaiters(node, key) == moduleCallers
                    && node.shardSubscribers(Channels.lock(key)) == clients.length);
        }
        firsts.forEach((key, first) -> assertEquals(0L, first.release(key, "first")));
        contenders.join(Duration.ofSeconds(60));

        int holdsPerName = (clients.length * threadsPerClient + moduleCallers) * cycles;
        guards.forEach((key, guard) -> {
            guard.assertNoBreach();
            assertEquals(holdsPerName, guard.entries(), key);
        });
        System.out.printf("[%s] %d holds on %d names, one per node (%d Redisson threads in %d clients and %d module callers each) in %.0f ms, no overlap%n",
                testName(), holdsPerName * nodes, nodes, clients.length * threadsPerClient, clients.length, moduleCallers,
                Processes.msSince(start, System.nanoTime()));
        StringBuilder sent = new StringBuilder();
        for (Server node : cluster.nodes()) {
            sent.append(String.format(" %s: %d scripts, %d WAIT, %d WAITAOF;", node.address(),
                    CommandStats.calls(node, "evalsha") + CommandStats.calls(node, "eval") - scripts.get(node.address()),
                    CommandStats.calls(node, "wait") - waits.get(node.address()),
                    CommandStats.calls(node, "waitaof") - waitaofs.get(node.address())));
        }
        System.out.printf("[%s] Redisson on replica-less masters:%s%n", testName(), sent);
        cluster.assertNothingLeft();
    }
}
