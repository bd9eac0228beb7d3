package lock.redisson.harness;

import java.util.ArrayList;
import java.util.List;
import java.util.function.Consumer;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.TestInfo;
import org.junit.jupiter.api.BeforeEach;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;

/**
 * A test class whose tests share one server with the module (started before the first,
 * killed after the last); each test's Redisson clients and module callers are closed after
 * it, and each test works on names of its own ({@link #name}).
 */
public abstract class OnOneServer {
    protected static Server server;
    private final List<RedissonClient> redissons = new ArrayList<>();
    private final List<ModuleCaller> callers = new ArrayList<>();
    private String testName;
    private ModuleCaller look;

    @BeforeAll
    static void startServer() {
        server = Server.start();
    }

    @AfterAll
    static void stopServer() {
        if (server != null) {
            server.close();
        }
    }

    @BeforeEach
    void nameTest(TestInfo info) {
        testName = info.getTestMethod().map(m -> m.getName()).orElse("test");
        try (var jedis = server.jedis()) {
            jedis.flushAll();
        }
    }

    @AfterEach
    void closeClients() {
        redissons.forEach(RedissonClient::shutdown);
        redissons.clear();
        callers.forEach(ModuleCaller::close);
        callers.clear();
        look = null;
    }

    /** A name of this test's own: {@code <test method>:<what>}. */
    protected String name(String what) {
        return testName + ":" + what;
    }

    /** A Redisson client with its defaults, shut down after the test. */
    protected RedissonClient redisson() {
        return redisson(c -> {});
    }

    protected RedissonClient redisson(Consumer<Config> tweak) {
        RedissonClient client = Redissons.single(server, tweak);
        redissons.add(client);
        return client;
    }

    /** A module caller on a connection of its own, closed after the test. */
    protected ModuleCaller module() {
        ModuleCaller caller = new ModuleCaller(server);
        callers.add(caller);
        return caller;
    }

    /** The test thread's own connection, for looking at the server (LOCK.INFO, LOCK.WAITERS...). */
    protected ModuleCaller look() {
        if (look == null) {
            look = module();
        }
        return look;
    }

    /** Waits until the module has {@code n} callers queued for {@code key}. */
    protected void waitForModuleWaiters(String key, int n) {
        Processes.waitUntil(n + " module callers queued for " + key, () -> look().waiters(key) == n);
    }

    /** Waits until the server holds no key (but {@code kept}), subscription or module waiter. */
    protected void assertNothingLeft(String... kept) {
        Leftovers.assertNone(server, kept);
    }
}
