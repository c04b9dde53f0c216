package io.flamestream.shim;

import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.spark.executor.TaskMetrics;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerJobStart;
import org.apache.spark.scheduler.SparkListenerTaskEnd;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Per-partition task metrics of streaming micro-batches: which task of which stage took how
 * long and read how many records. Enabled with {@code spark.extraListeners}.
 */
public class TaskSkewListener extends SparkListener {
  /** Stage id to (query id, batch id), learnt when the batch's job starts. */
  private final Map<Integer, Object[]> stageBatch = new ConcurrentHashMap<>();

  public TaskSkewListener() {
    Telemetry.get().markTaskListener();
  }

  @Override
  public void onJobStart(SparkListenerJobStart jobStart) {
    Properties properties = jobStart.properties();
    Telemetry.get().count("jobs");
    if (properties == null) {
      return;
    }
    String query = properties.getProperty("sql.streaming.queryId");
    String batch = properties.getProperty("streaming.sql.batchId");
    if (query == null || batch == null) {
      return;
    }
    Telemetry.get().count("streamingJobs");
    Object[] owner = {query, Long.parseLong(batch)};
    for (Object stage : CollectionConverters.asJava(jobStart.stageIds())) {
      stageBatch.put((Integer) stage, owner);
    }
    if (stageBatch.size() > 10_000) { // stages of long-finished batches
      stageBatch.keySet().removeIf(id -> id < (Integer) jobStart.stageIds().head() - 1_000);
    }
  }

  @Override
  public void onTaskEnd(SparkListenerTaskEnd taskEnd) {
    Object[] owner = stageBatch.get(taskEnd.stageId());
    TaskMetrics metrics = taskEnd.taskMetrics();
    Telemetry.get().count(owner == null ? "tasksOther" : "tasksStreaming");
    if (owner == null || metrics == null || !taskEnd.taskInfo().successful()) {
      return;
    }
    long in = metrics.inputMetrics().recordsRead() + metrics.shuffleReadMetrics().recordsRead();
    long out = metrics.outputMetrics().recordsWritten()
        + metrics.shuffleWriteMetrics().recordsWritten();
    Telemetry.TaskStat stat = new Telemetry.TaskStat(
        taskEnd.taskInfo().index(), taskEnd.taskInfo().duration(), in, out);
    Telemetry.get().addTask((String) owner[0], (Long) owner[1], taskEnd.stageId(), stat);
  }
}
