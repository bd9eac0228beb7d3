package lock.redisson.harness;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

import redis.clients.jedis.Jedis;
import redis.clients.jedis.commands.ProtocolCommand;

/**
 * A caller of the module's commands on a connection of its own (a {@code BLOCK} wait holds its
 * connection, as it would any client's): {@code LOCK.*}, {@code SEM.*}, {@code LATCH.*}. Replies
 * as Jedis gives them: integers as {@link Long}, nil as null, errors thrown as
 * {@code JedisDataException} whose message starts with the error code.
 */
public final class ModuleCaller implements AutoCloseable {
    private final Jedis jedis;

    public ModuleCaller(Jedis jedis) {
        this.jedis = jedis;
    }

    public ModuleCaller(Server server) {
        this(server.jedis());
    }

    /** A command by name, as {@code redis-cli} would send it. */
    record Command(String name) implements ProtocolCommand {
        @Override
        public byte[] getRaw() {
            return name.getBytes(StandardCharsets.US_ASCII);
        }
    }

    public Object call(String command, String... args) {
        return jedis.sendCommand(new Command(command), args);
    }

    /** A command that may wait in the server (no socket timeout while it does). */
    public Object callBlocking(String command, String... args) {
        return jedis.sendBlockingCommand(new Command(command), args);
    }

    public Jedis jedis() {
        return jedis;
    }

    // LOCK.*

    /** {@code LOCK.ACQUIRE key owner PX lease [more...]}: the hold count (or token), null if busy. */
    public Long acquire(String key, String owner, long leaseMs, String... more) {
        return (Long) call("LOCK.ACQUIRE", concat(new String[] {key, owner, "PX", String.valueOf(leaseMs)}, more));
    }

    /** {@code LOCK.ACQUIRE ... BLOCK wait}: the hold count (or token), null if the wait ran out. */
    public Long acquireWaiting(String key, String owner, long leaseMs, long waitMs, String... more) {
        return (Long) callBlocking("LOCK.ACQUIRE", concat(
                new String[] {key, owner, "PX", String.valueOf(leaseMs), "BLOCK", String.valueOf(waitMs)}, more));
    }

    public Long racquireWaiting(String key, String owner, long leaseMs, long waitMs) {
        return (Long) callBlocking("LOCK.RACQUIRE", key, owner, "PX", String.valueOf(leaseMs), "BLOCK", String.valueOf(waitMs));
    }

    public Long wacquireWaiting(String key, String owner, long leaseMs, long waitMs) {
        return (Long) callBlocking("LOCK.WACQUIRE", key, owner, "PX", String.valueOf(leaseMs), "BLOCK", String.valueOf(waitMs));
    }

    /** {@code LOCK.RELEASE key owner [READ|WRITE]}: the holds left. */
    public long release(String key, String owner, String... mode) {
        return (Long) call("LOCK.RELEASE", concat(new String[] {key, owner}, mode));
    }

    public long forceRelease(String key) {
        return (Long) call("LOCK.FORCERELEASE", key);
    }

    /** {@code LOCK.MACQUIRE n keys... owner PX lease BLOCK wait}: a reply per key, or null. */
    @SuppressWarnings("unchecked")
    public List<Long> macquireWaiting(List<String> keys, String owner, long leaseMs, long waitMs) {
        List<String> args = new ArrayList<>();
        args.add(String.valueOf(keys.size()));
        args.addAll(keys);
        args.addAll(List.of(owner, "PX", String.valueOf(leaseMs), "BLOCK", String.valueOf(waitMs)));
        return (List<Long>) callBlocking("LOCK.MACQUIRE", args.toArray(String[]::new));
    }

    @SuppressWarnings("unchecked")
    public List<Long> mrelease(List<String> keys, String owner) {
        List<String> args = new ArrayList<>();
        args.add(String.valueOf(keys.size()));
        args.addAll(keys);
        args.add(owner);
        return (List<Long>) call("LOCK.MRELEASE", args.toArray(String[]::new));
    }

    /** {@code LOCK.INFO key} as field -> value (owner, holds, ttl, waiters...), empty when free. */
    public java.util.Map<String, Object> info(String key) {
        return fields(call("LOCK.INFO", key));
    }

    /** A flat field/value reply (RESP2 map) as a map, bulk strings as text. */
    static java.util.Map<String, Object> fields(Object reply) {
        java.util.Map<String, Object> map = new java.util.LinkedHashMap<>();
        if (reply instanceof List<?> flat) {
            for (int i = 0; i + 1 < flat.size(); i += 2) {
                map.put(text(flat.get(i)), flat.get(i + 1) instanceof byte[] b ? text(b) : flat.get(i + 1));
            }
        }
        return map;
    }

    static String text(Object bulk) {
        return bulk instanceof byte[] b ? new String(b, StandardCharsets.UTF_8) : String.valueOf(bulk);
    }

    /** How many callers the module has queued for {@code key} (a lock or a semaphore). */
    public int waiters(String key) {
        return ((List<?>) call("LOCK.WAITERS", key, "COUNT", "0")).size();
    }

    /** Every key with module waiters ({@code LOCK.QUEUES}): empty when none waits anywhere. */
    public List<?> queues() {
        return (List<?>) call("LOCK.QUEUES");
    }

    // SEM.* and LATCH.*

    /** {@code SEM.ACQUIRE key owner PERMITS n PX lease BLOCK wait}: permits held, or null. */
    public Long semAcquireWaiting(String key, String owner, int permits, long leaseMs, long waitMs) {
        return (Long) callBlocking("SEM.ACQUIRE", key, owner, "PERMITS", String.valueOf(permits),
                "PX", String.valueOf(leaseMs), "BLOCK", String.valueOf(waitMs));
    }

    public Object semRelease(String key, String owner, int permits) {
        return call("SEM.RELEASE", key, owner, "PERMITS", String.valueOf(permits));
    }

    /** {@code SEM.TAKE key PERMITS n BLOCK wait}: Redisson RSemaphore's anonymous permits. */
    public Object semTakeWaiting(String key, int permits, long waitMs) {
        return callBlocking("SEM.TAKE", key, "PERMITS", String.valueOf(permits), "BLOCK", String.valueOf(waitMs));
    }

    public Object semGive(String key, int permits) {
        return call("SEM.GIVE", key, "PERMITS", String.valueOf(permits));
    }

    public Object latchAwait(String key, long waitMs) {
        return callBlocking("LATCH.AWAIT", key, "BLOCK", String.valueOf(waitMs));
    }

    /**
     * {@code SEM.INFO key} as field -> value ({@code permits}, {@code available}, {@code waiters},
     * {@code holders}: a list of flat field/value lists, owners as raw bytes), null when the
     * semaphore has neither key.
     */
    public java.util.Map<String, Object> semInfo(String key) {
        Object reply = call("SEM.INFO", key);
        return reply == null ? null : fields(reply);
    }

    /** {@code LATCH.INFO key} as field -> value (count, ttl, waiters), null when the latch is open. */
    public java.util.Map<String, Object> latchInfo(String key) {
        Object reply = call("LATCH.INFO", key);
        return reply == null ? null : fields(reply);
    }

    static String[] concat(String[] head, String[] tail) {
        String[] all = new String[head.length + tail.length];
        System.arraycopy(head, 0, all, 0, head.length);
        System.arraycopy(tail, 0, all, head.length, tail.length);
        return all;
    }

    @Override
    public void close() {
        jedis.close();
    }
}
