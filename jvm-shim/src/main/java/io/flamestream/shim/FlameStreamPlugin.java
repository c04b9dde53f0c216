package io.flamestream.shim;

import com.codahale.metrics.Counter;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.File;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.LinkedHashMap;
import java.util.Map;
import org.apache.spark.SparkContext;
import org.apache.spark.SparkEnv;
import org.apache.spark.api.plugin.DriverPlugin;
import org.apache.spark.api.plugin.ExecutorPlugin;
import org.apache.spark.api.plugin.PluginContext;
import org.apache.spark.api.plugin.SparkPlugin;

/**
 * flamestream's Spark plugin ({@code spark.plugins=io.flamestream.shim.FlameStreamPlugin}).
 *
 * <p>Driver part: starts the loopback endpoint and writes its rendezvous file into the
 * driver's block manager directories, the one path every Python process Spark starts on the
 * driver host is given ({@code SPARK_LOCAL_DIRS}); registers the gauges the Python side
 * pushes (front backlog, min-time lag, sink buffer, state, controller decisions) with
 * Spark's metrics system; keeps the application's live executors and their cores
 * ({@link ExecutorListener}); receives the executors' CPU reports. Executor part: counts the
 * executor's finished and failed tasks, and reports the CPU its process tree used
 * ({@link ProcessCpu}) to the driver part, at most every {@link Executor#REPORT_MS} ms.
 */
public class FlameStreamPlugin implements SparkPlugin {
  /** The rendezvous file's name, in each of the driver's block manager directories. */
  public static final String RENDEZVOUS = "flamestream-shim.json";

  private static volatile String rendezvousDirs = "";

  /** The folders holding the rendezvous file, comma-separated ("" before the plugin ran). */
  public static String rendezvousDirs() {
    return rendezvousDirs;
  }

  @Override
  public DriverPlugin driverPlugin() {
    return new Driver();
  }

  @Override
  public ExecutorPlugin executorPlugin() {
    return new Executor();
  }

  static final class Driver implements DriverPlugin {
    private ShimServer server;
    private final java.util.List<Path> written = new java.util.ArrayList<>();

    @Override
    public Map<String, String> init(SparkContext sc, PluginContext context) {
      try {
        // before the scheduler starts (plugins are initialised first): every executor is seen
        ExecutorListener executors = new ExecutorListener();
        sc.addSparkListener(executors);
        server = new ShimServer(sc.getConf(), sc.version(), executors);
        server.start();
        Map<String, Object> card = new LinkedHashMap<>();
        card.put("shim", ShimServer.VERSION);
        card.put("spark", sc.version());
        card.put("port", server.port());
        card.put("secret", server.secret());
        card.put("app", sc.applicationId());
        byte[] bytes = new ObjectMapper().writeValueAsBytes(card);
        java.util.List<String> dirs = new java.util.ArrayList<>();
        for (File dir : SparkEnv.get().blockManager().diskBlockManager().localDirs()) {
          written.add(writePrivately(dir.toPath().resolve(RENDEZVOUS), bytes));
          dirs.add(dir.getPath());
        }
        rendezvousDirs = String.join(",", dirs);
      } catch (IOException e) {
        throw new IllegalStateException("flamestream shim: cannot start its endpoint", e);
      }
      return Map.of("shim", ShimServer.VERSION);
    }

    /** An executor's CPU report, {@code "cpu <executor id> <ms>"}. */
    @Override
    public Object receive(Object message) {
      String[] parts = String.valueOf(message).split(" ");
      if (parts.length == 3 && parts[0].equals("cpu")) {
        Telemetry.get().reportCpu(parts[1], Long.parseLong(parts[2]));
      }
      return null;
    }

    @Override
    public void registerMetrics(String appId, PluginContext context) {
      Telemetry.get().attach(context.metricRegistry());
    }

    @Override
    public void shutdown() {
      if (server != null) {
        server.close();
      }
      for (Path path : written) {
        try {
          Files.deleteIfExists(path);
        } catch (IOException ignored) {
          // the block manager removes its directories anyway
        }
      }
    }

    private static Path writePrivately(Path target, byte[] bytes) throws IOException {
      Path tmp = target.resolveSibling(RENDEZVOUS + ".tmp");
      Files.write(tmp, bytes);
      try {
        Files.setPosixFilePermissions(tmp, PosixFilePermissions.fromString("rw-------"));
      } catch (UnsupportedOperationException notPosix) {
        // the directory is the user's own already
      }
      Files.move(tmp, target, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
      return target;
    }
  }

  static final class Executor implements ExecutorPlugin {
    /** Reports at most this often (a task's end costs a {@code /proc} walk otherwise). */
    static final long REPORT_MS = 250;

    private Counter succeeded;
    private Counter failed;
    private PluginContext context;
    private volatile long reported;

    @Override
    public void init(PluginContext pluginContext, Map<String, String> extraConf) {
      context = pluginContext;
      succeeded = context.metricRegistry().counter("tasks.succeeded");
      failed = context.metricRegistry().counter("tasks.failed");
    }

    @Override
    public void onTaskSucceeded() {
      succeeded.inc();
      reportCpu();
    }

    @Override
    public void onTaskFailed(org.apache.spark.TaskFailedReason failureReason) {
      failed.inc();
      reportCpu();
    }

    /** The process tree's CPU to the driver (the driver reads its own: not in local mode). */
    private void reportCpu() {
      long now = System.currentTimeMillis();
      if (now - reported < REPORT_MS || "driver".equals(context.executorID())) {
        return;
      }
      reported = now;
      long millis = ProcessCpu.treeMillis();
      if (millis >= 0) {
        try {
          context.send("cpu " + context.executorID() + " " + millis);
        } catch (java.io.IOException lost) {
          // the next task's end reports again
        }
      }
    }
  }
}
