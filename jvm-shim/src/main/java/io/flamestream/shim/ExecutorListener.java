package io.flamestream.shim;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerExecutorAdded;
import org.apache.spark.scheduler.SparkListenerExecutorRemoved;

/**
 * The application's live executors and their cores, as the scheduler announces them. The
 * plugin's driver part registers one per application (no configuration needed), before the
 * scheduler starts, so the first executors are seen too: on {@code local[N]} the driver itself
 * (one executor, {@code N} cores); on a cluster each executor a Worker (or dynamic allocation)
 * starts, until it is removed (its Worker lost, idle under dynamic allocation, killed).
 */
final class ExecutorListener extends SparkListener {
  /** One live executor. */
  record Live(String host, int cores, long since) {}

  private final Map<String, Live> live = new TreeMap<>();
  private long added;
  private long removed;
  private long changedAt = System.currentTimeMillis();

  @Override
  public synchronized void onExecutorAdded(SparkListenerExecutorAdded event) {
    live.put(
        event.executorId(),
        new Live(event.executorInfo().executorHost(), event.executorInfo().totalCores(),
            event.time()));
    added++;
    changedAt = event.time();
  }

  @Override
  public synchronized void onExecutorRemoved(SparkListenerExecutorRemoved event) {
    if (live.remove(event.executorId()) != null) {
      removed++;
      changedAt = event.time();
    }
  }

  /**
   * What the endpoint's {@code executors} operation returns: the live executors (id, host,
   * cores), their count and cores in total, how many were ever added and removed, and when the
   * set last changed (epoch ms).
   */
  synchronized Map<String, Object> snapshot() {
    List<Map<String, Object>> list = new ArrayList<>();
    int cores = 0;
    for (Map.Entry<String, Live> entry : live.entrySet()) {
      Map<String, Object> one = new LinkedHashMap<>();
      one.put("id", entry.getKey());
      one.put("host", entry.getValue().host());
      one.put("cores", entry.getValue().cores());
      list.add(one);
      cores += entry.getValue().cores();
    }
    Map<String, Object> out = new LinkedHashMap<>();
    out.put("executors", list.size());
    out.put("cores", cores);
    out.put("list", list);
    out.put("added", added);
    out.put("removed", removed);
    out.put("changedAt", changedAt);
    return out;
  }
}
