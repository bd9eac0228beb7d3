package lock.redisson.harness;

/**
 * What a server ran, from {@code INFO commandstats}: a command is counted however it came,
 * from a client or from inside a script ({@code redis.call}), so the difference across a
 * Redisson call shows which commands its script and its follow-ups (WAIT) really sent. A
 * module's own publishes ({@code RM_PublishMessage*}) are not commands and are not counted.
 */
public final class CommandStats {
    private CommandStats() {}

    /** How many times {@code command} ran on {@code server} since it started (0 if never). */
    public static long calls(Server server, String command) {
        String stats = server.info("commandstats", "cmdstat_" + command.toLowerCase());
        if (stats == null) {
            return 0;
        }
        // calls=3,usec=12,usec_per_call=4.00,rejected_calls=0,failed_calls=0
        for (String part : stats.split(",")) {
            if (part.startsWith("calls=")) {
                return Long.parseLong(part.substring("calls=".length()));
            }
        }
        throw new IllegalStateException("no calls in cmdstat_" + command + ": " + stats);
    }
}
