package io.flamestream.shim;

import org.apache.spark.sql.streaming.StreamingQueryListener;

/**
 * Keeps the last progress events of every streaming query. Enabled with
 * {@code spark.sql.streaming.streamingQueryListeners}.
 */
public class ProgressListener extends StreamingQueryListener {
  public ProgressListener() {
    Telemetry.get().markProgressListener();
  }

  @Override
  public void onQueryStarted(StreamingQueryListener.QueryStartedEvent event) {}

  @Override
  public void onQueryProgress(StreamingQueryListener.QueryProgressEvent event) {
    Telemetry.get().addProgress(event.progress().id().toString(), event.progress().json());
  }

  @Override
  public void onQueryIdle(StreamingQueryListener.QueryIdleEvent event) {}

  @Override
  public void onQueryTerminated(StreamingQueryListener.QueryTerminatedEvent event) {}
}
