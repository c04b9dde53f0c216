package io.flamestream.shim;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.SecureRandom;
import java.util.HexFormat;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.TreeMap;
import org.apache.spark.SparkConf;
import org.apache.spark.sql.SparkSession;
import scala.Option;
import scala.Tuple2;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The loopback endpoint flamestream's Python processes on the driver host talk to (the
 * planner, the fronts' long-lived reader process, sink commits: none of them has a Spark
 * session). One JSON line in, one JSON line out, per connection; every request carries the
 * secret from the rendezvous file, which only this machine's user can read.
 *
 * <p>Operations: {@code hello} (versions), {@code conf} ({@code spark.flamestream.*} of the
 * default session, over the Spark configuration, and the context's default parallelism),
 * {@code sparkConf} (the values of the named Spark confs that are set, likewise: the few of
 * Spark's own a sink mirrors), {@code progress} (optionally only events
 * containing {@code match}, the {@code last} few) and {@code tasks} (what the listeners
 * collected), {@code metrics} (set gauges), {@code gauges} (their values), {@code executors}
 * (the application's live executors and their cores).
 */
final class ShimServer implements Runnable {
  static final String VERSION = "0.1.0";
  static final String PREFIX = "spark.flamestream.";

  private final ServerSocket socket;
  private final String secret;
  private final SparkConf sparkConf;
  private final String sparkVersion;
  private final ExecutorListener executors;
  private final ObjectMapper json = new ObjectMapper();

  ShimServer(SparkConf sparkConf, String sparkVersion, ExecutorListener executors)
      throws IOException {
    this.socket = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
    byte[] bytes = new byte[24];
    new SecureRandom().nextBytes(bytes);
    this.secret = HexFormat.of().formatHex(bytes);
    this.sparkConf = sparkConf;
    this.sparkVersion = sparkVersion;
    this.executors = executors;
  }

  int port() {
    return socket.getLocalPort();
  }

  String secret() {
    return secret;
  }

  void start() {
    Thread thread = new Thread(this, "flamestream-shim-server");
    thread.setDaemon(true);
    thread.start();
  }

  void close() {
    try {
      socket.close();
    } catch (IOException ignored) {
      // shutting down
    }
  }

  @Override
  public void run() {
    while (!socket.isClosed()) {
      try (Socket client = socket.accept()) {
        client.setSoTimeout(10_000);
        serve(client);
      } catch (IOException | RuntimeException e) {
        if (socket.isClosed()) {
          return;
        }
        // one bad client must not stop the endpoint; the client sees its connection drop
      }
    }
  }

  private void serve(Socket client) throws IOException {
    BufferedReader in = new BufferedReader(
        new InputStreamReader(client.getInputStream(), StandardCharsets.UTF_8));
    String line = in.readLine();
    Map<String, Object> reply = new LinkedHashMap<>();
    if (line == null) {
      return;
    }
    JsonNode request = json.readTree(line);
    String given = request.path("secret").asText("");
    if (!MessageDigest.isEqual(
        given.getBytes(StandardCharsets.UTF_8), secret.getBytes(StandardCharsets.UTF_8))) {
      reply.put("error", "bad secret");
    } else {
      answer(request, reply);
    }
    OutputStream out = client.getOutputStream();
    out.write(json.writeValueAsBytes(reply));
    out.write('\n');
    out.flush();
  }

  private void answer(JsonNode request, Map<String, Object> reply) {
    Telemetry telemetry = Telemetry.get();
    String op = request.path("op").asText("");
    switch (op) {
      case "hello" -> {
        reply.put("shim", VERSION);
        reply.put("spark", sparkVersion);
        reply.put("taskListener", telemetry.taskListenerInstalled());
        reply.put("progressListener", telemetry.progressListenerInstalled());
        reply.put("counts", telemetry.counts());
      }
      case "conf" -> {
        reply.put("conf", flamestreamConf());
        // fronts pack a batch's sources into this many read tasks unless told otherwise
        Option<SparkSession> session = SparkSession.getDefaultSession();
        if (session.isDefined()) {
          reply.put("parallelism", session.get().sparkContext().defaultParallelism());
        }
      }
      case "sparkConf" -> reply.put("values", namedConf(request.path("keys")));
      case "progress" -> reply.put(
          "progress",
          telemetry.progress(request.path("match").asText(""), request.path("last").asInt(0)));
      case "tasks" -> reply.put("tasks", telemetry.tasks());
      case "metrics" -> {
        String scope = request.path("scope").asText("flamestream");
        Iterator<Map.Entry<String, JsonNode>> values = request.path("values").fields();
        while (values.hasNext()) {
          Map.Entry<String, JsonNode> value = values.next();
          telemetry.setMetric(scope + "." + value.getKey(), value.getValue().asDouble());
        }
        reply.put("metrics", telemetry.metrics().size());
      }
      case "gauges" -> reply.put("gauges", telemetry.metrics());
      case "executors" -> reply.putAll(executors.snapshot());
      case "cpu" -> reply.putAll(telemetry.cpu());
      default -> reply.put("error", "unknown op: " + op);
    }
  }

  /** The named confs that are set: the default session's SQL conf over the Spark conf. */
  private Map<String, String> namedConf(JsonNode keys) {
    Map<String, String> conf = new TreeMap<>();
    Option<SparkSession> session = SparkSession.getDefaultSession();
    for (JsonNode key : keys) {
      String name = key.asText();
      Option<String> value = session.isDefined()
          ? session.get().conf().getOption(name)
          : Option.empty();
      if (value.isEmpty()) {
        value = sparkConf.getOption(name);
      }
      if (value.isDefined()) {
        conf.put(name, value.get());
      }
    }
    return conf;
  }

  /** Spark configuration first, then the default session's SQL conf (SET wins). */
  private Map<String, String> flamestreamConf() {
    Map<String, String> conf = new TreeMap<>();
    for (Tuple2<String, String> entry : sparkConf.getAll()) {
      if (entry._1().startsWith(PREFIX)) {
        conf.put(entry._1(), entry._2());
      }
    }
    Option<SparkSession> session = SparkSession.getDefaultSession();
    if (session.isDefined()) {
      CollectionConverters.asJava(session.get().conf().getAll()).forEach((key, value) -> {
        if (key.startsWith(PREFIX)) {
          conf.put(key, value);
        }
      });
    }
    return conf;
  }
}
