package io.flamestream.shim;

import com.codahale.metrics.Gauge;
import com.codahale.metrics.MetricRegistry;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * What the listeners collect and the Python side reads, shared by the plugin, the listeners
 * and the endpoint (they are separate objects Spark creates from the configuration, so they
 * meet here). Bounded: the last {@link #KEEP} progress events per query and task summaries
 * of the last {@link #KEEP} batches per query.
 */
public final class Telemetry {
  /** Progress events and batches kept per query. */
  static final int KEEP = 32;

  private static final Telemetry INSTANCE = new Telemetry();

  /** The one instance of this JVM. */
  public static Telemetry get() {
    return INSTANCE;
  }

  private final Map<String, Deque<String>> progress = new LinkedHashMap<>();
  private final Map<String, Map<Long, BatchTasks>> tasks = new LinkedHashMap<>();
  private final Map<String, Double> metrics = new ConcurrentHashMap<>();
  private final Map<String, Long> counts = new ConcurrentHashMap<>();
  private final Map<String, Long> executorCpu = new ConcurrentHashMap<>();
  private volatile MetricRegistry registry;
  private volatile boolean listenersSeen;
  private volatile boolean progressSeen;

  private Telemetry() {}

  /** The plugin's metric registry: pushed values appear there as gauges. */
  void attach(MetricRegistry metricRegistry) {
    // Spark registers a plugin's metrics only if there are some when registerMetrics returns
    for (String what : new String[] {"jobs", "streamingJobs", "tasksStreaming", "progress"}) {
      metricRegistry.register(
          "listener." + what, (Gauge<Long>) () -> counts.getOrDefault(what, 0L));
    }
    registry = metricRegistry;
    for (String name : metrics.keySet()) {
      register(name);
    }
  }

  /** Count an event of the listeners (shown by {@code hello} and as gauges). */
  void count(String what) {
    counts.merge(what, 1L, Long::sum);
  }

  Map<String, Long> counts() {
    return new LinkedHashMap<>(counts);
  }

  void markTaskListener() {
    listenersSeen = true;
  }

  void markProgressListener() {
    progressSeen = true;
  }

  boolean taskListenerInstalled() {
    return listenersSeen;
  }

  boolean progressListenerInstalled() {
    return progressSeen;
  }

  synchronized void addProgress(String queryId, String json) {
    count("progress");
    Deque<String> events = progress.computeIfAbsent(queryId, k -> new ArrayDeque<>());
    events.addLast(json);
    bound(progress);
    while (events.size() > KEEP) {
      events.removeFirst();
    }
  }

  /** Queries kept (the oldest are forgotten first). */
  static final int KEEP_QUERIES = 16;

  private static <V> void bound(Map<String, V> byQuery) {
    while (byQuery.size() > KEEP_QUERIES) {
      byQuery.remove(byQuery.keySet().iterator().next());
    }
  }

  /**
   * The last progress events (JSON text) of every query, oldest first: only those containing
   * {@code match} (a controller's id) if not empty, and only the {@code last} of each query if
   * positive.
   */
  synchronized Map<String, List<String>> progress(String match, int last) {
    Map<String, List<String>> copy = new LinkedHashMap<>();
    progress.forEach((query, events) -> {
      List<String> kept = new ArrayList<>();
      for (String event : events) {
        if (match.isEmpty() || event.contains(match)) {
          kept.add(event);
        }
      }
      if (last > 0 && kept.size() > last) {
        kept = new ArrayList<>(kept.subList(kept.size() - last, kept.size()));
      }
      if (!kept.isEmpty()) {
        copy.put(query, kept);
      }
    });
    return copy;
  }

  synchronized void addTask(String queryId, long batchId, int stageId, TaskStat stat) {
    Map<Long, BatchTasks> batches = tasks.computeIfAbsent(queryId, k -> new LinkedHashMap<>());
    batches.computeIfAbsent(batchId, BatchTasks::new).add(stageId, stat);
    bound(tasks);
    while (batches.size() > KEEP) {
      batches.remove(batches.keySet().iterator().next());
    }
  }

  /** Per query, per batch, per stage: the tasks' durations and records (for skew). */
  synchronized Map<String, List<Map<String, Object>>> tasks() {
    Map<String, List<Map<String, Object>>> copy = new LinkedHashMap<>();
    tasks.forEach((query, batches) -> {
      List<Map<String, Object>> list = new ArrayList<>();
      batches.values().forEach(b -> list.add(b.summary()));
      copy.put(query, list);
    });
    return copy;
  }

  /** The CPU milliseconds an executor's process tree has used (its latest report). */
  void reportCpu(String executorId, long millis) {
    executorCpu.merge(executorId, millis, Math::max);
  }

  /**
   * CPU milliseconds used by the application: the driver's process tree (read now; on
   * {@code local[N]} it holds the executor and every Python worker) and each other
   * executor's latest report. Executors that were removed keep counting: the total only grows.
   */
  Map<String, Object> cpu() {
    Map<String, Object> out = new LinkedHashMap<>();
    long driver = ProcessCpu.treeMillis();
    long total = Math.max(0, driver);
    for (long millis : executorCpu.values()) {
      total += millis;
    }
    out.put("driverMs", driver);
    out.put("executorMs", new LinkedHashMap<>(executorCpu));
    out.put("totalMs", total);
    out.put("measured", driver >= 0);
    return out;
  }

  /** Set a metric pushed by the Python side; new names become gauges. */
  void setMetric(String name, double value) {
    boolean fresh = metrics.put(name, value) == null;
    if (fresh && registry != null) {
      register(name);
    }
  }

  Map<String, Double> metrics() {
    return new LinkedHashMap<>(metrics);
  }

  private void register(String name) {
    MetricRegistry target = registry;
    if (target == null || target.getGauges().containsKey(name)) {
      return;
    }
    try {
      target.register(name, (Gauge<Double>) () -> metrics.getOrDefault(name, 0.0));
    } catch (IllegalArgumentException alreadyThere) {
      // registered concurrently by another push: the gauge reads the same map
    }
  }

  /** One finished task. */
  record TaskStat(int partition, long durationMs, long recordsIn, long recordsOut) {}

  /** The tasks of one micro-batch, by stage. */
  static final class BatchTasks {
    private final long batchId;
    private final Map<Integer, List<TaskStat>> stages = new LinkedHashMap<>();

    BatchTasks(long batchId) {
      this.batchId = batchId;
    }

    void add(int stageId, TaskStat stat) {
      stages.computeIfAbsent(stageId, k -> new ArrayList<>()).add(stat);
    }

    Map<String, Object> summary() {
      List<Map<String, Object>> list = new ArrayList<>();
      stages.forEach((stage, stats) -> {
        Map<String, Object> s = new LinkedHashMap<>();
        s.put("stage", stage);
        List<List<Long>> rows = new ArrayList<>();
        for (TaskStat t : stats) {
          rows.add(List.of((long) t.partition(), t.durationMs(), t.recordsIn(), t.recordsOut()));
        }
        s.put("tasks", rows); // [partition, duration ms, records in, records out]
        list.add(s);
      });
      Map<String, Object> out = new LinkedHashMap<>();
      out.put("batch", batchId);
      out.put("stages", list);
      return out;
    }
  }
}
