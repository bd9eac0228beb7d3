package lock.redisson.harness;

import java.util.function.Consumer;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;

/**
 * A test class whose tests share one server with the module (started before the first,
 * killed after the last), emptied before each ({@link PerTestClients}: each test's clients are
 * closed after it, and it works on names of its own).
 */
public abstract class OnOneServer extends PerTestClients {
    protected static Server server;
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
    void emptyServer() {
        try (var jedis = server.jedis()) {
            jedis.flushAll();
        }
    }

    @AfterEach
    void forgetLook() {
        // Closed with the test's other callers.
        look = null;
    }

    /** A Redisson client with its defaults, shut down after the test. */
    protected RedissonClient redisson() {
        return redisson(c -> {});
    }

    protected RedissonClient redisson(Consumer<Config> tweak) {
        return keep(Redissons.single(server, tweak));
    }

    /** A module caller on a connection of its own, closed after the test. */
    protected ModuleCaller module() {
        return moduleOn(server);
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
