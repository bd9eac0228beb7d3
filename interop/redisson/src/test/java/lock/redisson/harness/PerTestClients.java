package lock.redisson.harness;

import java.util.ArrayList;
import java.util.List;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.TestInfo;
import org.redisson.api.RedissonClient;

/**
 * What each test of a class owns: names of its own ({@link #name}), and the Redisson clients and
 * module callers it opened, shut down and closed after it. The servers are the subclass's (one
 * server, a cluster, a Sentinel group), shared by its tests.
 */
public abstract class PerTestClients {
    private final List<RedissonClient> redissons = new ArrayList<>();
    private final List<ModuleCaller> callers = new ArrayList<>();
    private String testName;

    @BeforeEach
    void nameTest(TestInfo info) {
        testName = info.getTestMethod().map(m -> m.getName()).orElse("test");
    }

    @AfterEach
    void closeClients() {
        redissons.forEach(RedissonClient::shutdown);
        redissons.clear();
        callers.forEach(ModuleCaller::close);
        callers.clear();
    }

    /** The running test's method name. */
    protected String testName() {
        return testName;
    }

    /** A name of this test's own: {@code <test method>:<what>}. */
    protected String name(String what) {
        return testName + ":" + what;
    }

    /** {@code client}, shut down after the test. */
    protected RedissonClient keep(RedissonClient client) {
        redissons.add(client);
        return client;
    }

    /** A module caller on a connection of its own to {@code server}, closed after the test. */
    protected ModuleCaller moduleOn(Server server) {
        ModuleCaller caller = new ModuleCaller(server);
        callers.add(caller);
        return caller;
    }
}
