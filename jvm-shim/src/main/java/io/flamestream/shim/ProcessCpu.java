package io.flamestream.shim;

import java.io.IOException;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * CPU time used by this JVM and every process below it, from {@code /proc} (Linux).
 *
 * <p>Spark's task metrics count the JVM task thread's CPU only; a PySpark query spends most of
 * its CPU in Python worker processes, which Spark forks below the executor (through its
 * daemon) and, on the driver, in the Python data source processes. So the budget policy's
 * "CPU per record" is read here, over the whole process tree: each live process's user and
 * system time, plus the time of the children it has already reaped ({@code cutime},
 * {@code cstime}), so a Python worker that exits keeps counting in its parent.
 *
 * <p>With warm starts ({@code flamestream-python}) Spark's Python processes are forked by a
 * warm server that outlives the launcher that started it, so it hangs below init, not below
 * this JVM: the trees of the warm servers serving this JVM (their command line is
 * {@code -m flamestream.warm_start <base> <this JVM's pid>}) count too.
 */
final class ProcessCpu {
  /** Clock ticks per second of {@code /proc/<pid>/stat} (USER_HZ: 100 on Linux). */
  static final double TICKS_PER_SECOND = 100.0;

  private ProcessCpu() {}

  /** Milliseconds of CPU of this process and its descendants; -1 without {@code /proc}. */
  static long treeMillis() {
    Path proc = Paths.get("/proc");
    if (!Files.isDirectory(proc)) {
      return -1;
    }
    long self = ProcessHandle.current().pid();
    Map<Long, List<Long>> children = new HashMap<>();
    Map<Long, Long> ticks = new HashMap<>();
    try (DirectoryStream<Path> entries = Files.newDirectoryStream(proc, "[0-9]*")) {
      for (Path entry : entries) {
        long[] stat = readStat(entry.resolve("stat"));
        if (stat != null) {
          children.computeIfAbsent(stat[1], k -> new ArrayList<>()).add(stat[0]);
          ticks.put(stat[0], stat[2]);
        }
      }
    } catch (IOException e) {
      return -1;
    }
    long total = 0;
    Deque<Long> todo = new ArrayDeque<>(List.of(self));
    todo.addAll(warmServers(proc, ticks.keySet(), self));
    java.util.Set<Long> seen = new java.util.HashSet<>();
    while (!todo.isEmpty()) {
      long pid = todo.pop();
      if (!seen.add(pid)) {
        continue; // a warm server still below this JVM
      }
      total += ticks.getOrDefault(pid, 0L);
      todo.addAll(children.getOrDefault(pid, List.of()));
    }
    return Math.round(total * 1000 / TICKS_PER_SECOND);
  }

  /** The warm servers serving the JVM {@code jvm} (see the class comment). */
  private static List<Long> warmServers(Path proc, Iterable<Long> pids, long jvm) {
    List<Long> found = new ArrayList<>();
    String tail = "flamestream.warm_start";
    String owner = Long.toString(jvm);
    for (long pid : pids) {
      byte[] raw;
      try {
        raw = Files.readAllBytes(proc.resolve(Long.toString(pid)).resolve("cmdline"));
      } catch (IOException | RuntimeException gone) {
        continue;
      }
      String[] args = new String(raw, java.nio.charset.StandardCharsets.UTF_8).split("\0");
      int n = args.length;
      if (n >= 4 && args[n - 3].equals(tail) && args[n - 1].equals(owner)) {
        found.add(pid);
      }
    }
    return found;
  }

  /** {pid, ppid, utime + stime + cutime + cstime} of one process; null if it is gone. */
  private static long[] readStat(Path stat) {
    String text;
    try {
      text = Files.readString(stat);
    } catch (IOException | RuntimeException gone) {
      return null;
    }
    // the command name (field 2) is in parentheses and may contain spaces: split after it
    int close = text.lastIndexOf(')');
    if (close < 0) {
      return null;
    }
    String[] f = text.substring(close + 2).trim().split(" ");
    // f[0] is field 3 (state): ppid is field 4, utime..cstime fields 14..17
    if (f.length < 15) {
      return null;
    }
    try {
      long pid = Long.parseLong(text.substring(0, text.indexOf(' ')).trim());
      long ppid = Long.parseLong(f[1]);
      long cpu = Long.parseLong(f[11]) + Long.parseLong(f[12])
          + Long.parseLong(f[13]) + Long.parseLong(f[14]);
      return new long[] {pid, ppid, cpu};
    } catch (NumberFormatException bad) {
      return null;
    }
  }
}
