// The word count of benchmarks/word_count.py on Apache Storm (LocalCluster), written as Storm users write it:
//
//     sentences (one a nextTuple) --shuffle--> split (2) --fields(word)--> count (2) --shuffle--> sink (2)
//
// split is a BaseBasicBolt, count emits (word, count) anchored to its input and acks it, the sink is a
// BaseBasicBolt. The spout reads its sentences from a file (one a line) in open() and emits them with the line
// number as message id. Every run is one more topology submitted to the same LocalCluster, killed when its
// figures are taken. Prints one name=value per line; benchmarks/peers/run.py runs it (see there and
// benchmarks/peers/README.md).
//
// The half-capacity latency needs a sentence file sized by the acked throughput measured in the same run: the
// program prints "paced_sentences_needed=N" and reads the path of a file of N sentences from standard input.

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.LongAdder;
import org.apache.storm.Config;
import org.apache.storm.LocalCluster;
import org.apache.storm.generated.KillOptions;
import org.apache.storm.generated.StormTopology;
import org.apache.storm.spout.SpoutOutputCollector;
import org.apache.storm.task.OutputCollector;
import org.apache.storm.task.TopologyContext;
import org.apache.storm.topology.BasicOutputCollector;
import org.apache.storm.topology.OutputFieldsDeclarer;
import org.apache.storm.topology.TopologyBuilder;
import org.apache.storm.topology.base.BaseBasicBolt;
import org.apache.storm.topology.base.BaseRichBolt;
import org.apache.storm.topology.base.BaseRichSpout;
import org.apache.storm.tuple.Fields;
import org.apache.storm.tuple.Tuple;
import org.apache.storm.tuple.Values;

public class PeerWordCount {
    static final int WORDS_PER_SENTENCE = 8;

    // LocalCluster runs every task in this JVM: the spout and the sink report here.
    static final AtomicLong ACKED = new AtomicLong();
    static final AtomicLong FAILED = new AtomicLong();
    static final LongAdder SUNK = new LongAdder();
    static volatile long[] latencyNanos = new long[0]; // by message id: emit to ack, as the spout sees it
    static volatile long firstEmit = 0; // System.nanoTime() of the run's first emit

    public static class Sentences extends BaseRichSpout {
        private final String path;
        private final double rate; // sentences a second; 0: as fast as Storm takes them
        private transient List<String> sentences;
        private transient long[] emitted;
        private transient SpoutOutputCollector collector;
        private transient int next;
        private transient long started;

        Sentences(String path, double rate) {
            this.path = path;
            this.rate = rate;
        }

        @Override
        public void open(Map<String, Object> conf, TopologyContext context, SpoutOutputCollector collector) {
            try {
                sentences = Files.readAllLines(Paths.get(path), StandardCharsets.UTF_8);
            } catch (IOException e) {
                throw new RuntimeException(e);
            }
            this.collector = collector;
            emitted = new long[sentences.size()];
            next = 0;
            started = System.nanoTime();
        }

        @Override
        public void nextTuple() {
            if (next >= sentences.size()) {
                return;
            }
            if (rate > 0 && next >= rate * (System.nanoTime() - started) / 1e9) {
                return;
            }
            emitted[next] = System.nanoTime();
            if (next == 0) {
                firstEmit = emitted[0];
            }
            collector.emit(new Values(sentences.get(next)), next);
            next++;
        }

        @Override
        public void ack(Object msgId) {
            int id = (Integer) msgId;
            latencyNanos[id] = System.nanoTime() - emitted[id];
            ACKED.incrementAndGet();
        }

        @Override
        public void fail(Object msgId) {
            FAILED.incrementAndGet();
        }

        @Override
        public void declareOutputFields(OutputFieldsDeclarer declarer) {
            declarer.declare(new Fields("sentence"));
        }
    }

    public static class Split extends BaseBasicBolt {
        @Override
        public void execute(Tuple tuple, BasicOutputCollector collector) {
            for (String word : tuple.getString(0).split(" ")) {
                collector.emit(new Values(word));
            }
        }

        @Override
        public void declareOutputFields(OutputFieldsDeclarer declarer) {
            declarer.declare(new Fields("word"));
        }
    }

    public static class Count extends BaseRichBolt {
        private transient OutputCollector collector;
        private transient Map<String, Integer> counts;

        @Override
        public void prepare(Map<String, Object> conf, TopologyContext context, OutputCollector collector) {
            this.collector = collector;
            this.counts = new HashMap<>();
        }

        @Override
        public void execute(Tuple tuple) {
            String word = tuple.getString(0);
            int count = counts.merge(word, 1, Integer::sum);
            collector.emit(tuple, new Values(word, count));
            collector.ack(tuple);
        }

        @Override
        public void declareOutputFields(OutputFieldsDeclarer declarer) {
            declarer.declare(new Fields("word", "count"));
        }
    }

    public static class Sink extends BaseBasicBolt {
        @Override
        public void execute(Tuple tuple, BasicOutputCollector collector) {
            SUNK.increment();
        }

        @Override
        public void declareOutputFields(OutputFieldsDeclarer declarer) {}
    }

    static StormTopology topology(Sentences spout) {
        TopologyBuilder b = new TopologyBuilder();
        b.setSpout("sentences", spout, 1);
        b.setBolt("split", new Split(), 2).shuffleGrouping("sentences");
        b.setBolt("count", new Count(), 2).fieldsGrouping("split", new Fields("word"));
        b.setBolt("sink", new Sink(), 2).shuffleGrouping("count");
        return b.createTopology();
    }

    // -- running it --------------------------------------------------------------------------------------------

    static LocalCluster cluster;
    static int submitted = 0;
    static int workers = 1;

    static int lines(String path) throws IOException {
        try (var stream = Files.lines(Paths.get(path), StandardCharsets.UTF_8)) {
            return (int) stream.count();
        }
    }

    static Config conf(int maxPending, boolean acking) {
        Config conf = new Config();
        conf.setMaxSpoutPending(maxPending);
        conf.setNumWorkers(workers);
        if (!acking) {
            conf.setNumAckers(0); // the spout's ack() comes at once, on emit
        }
        return conf;
    }

    static void reset(int sentences) {
        ACKED.set(0);
        FAILED.set(0);
        SUNK.reset();
        latencyNanos = new long[sentences];
        firstEmit = 0;
    }

    static String submit(Config conf, StormTopology topology) throws Exception {
        String name = "bench-" + (++submitted);
        cluster.submitTopology(name, conf, topology);
        return name;
    }

    static void kill(String name) throws Exception {
        KillOptions options = new KillOptions();
        options.set_wait_secs(0);
        cluster.killTopologyWithOpts(name, options);
        long deadline = System.nanoTime() + 60_000_000_000L;
        while (cluster.getTopologySummaries().stream().anyMatch(t -> t.get_name().equals(name))) {
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("topology " + name + " was not killed within 60 s");
            }
            Thread.sleep(50);
        }
    }

    /** Seconds from the spout's first emit to the end, in the last throughput() run. */
    static double lastFromFirstEmit;

    /** Seconds from submitting to the last sentence acked (acking) or the last word at the sink (not). */
    static double throughput(String path, int sentences, int maxPending, boolean acking) throws Exception {
        long words = (long) sentences * WORDS_PER_SENTENCE;
        reset(sentences);
        StormTopology topology = topology(new Sentences(path, 0));
        Config conf = conf(maxPending, acking);
        long started = System.nanoTime();
        String name = submit(conf, topology);
        while (acking ? ACKED.get() < sentences : SUNK.sum() < words) {
            if (FAILED.get() > 0) {
                throw new IllegalStateException(FAILED.get() + " sentences failed (timed out) in " + name);
            }
            Thread.sleep(10);
        }
        long ended = System.nanoTime();
        double seconds = (ended - started) / 1e9;
        lastFromFirstEmit = (ended - firstEmit) / 1e9;
        Thread.sleep(200); // the last acks' (word, count) tuples may still be on their way to the sink
        if (SUNK.sum() != words) {
            throw new IllegalStateException("the sink got " + SUNK.sum() + " words of " + words);
        }
        kill(name);
        return seconds;
    }

    /** Complete latency p50 and p99 (ms) as the spout sees it, the spout paced at rate sentences a second. */
    static double[] latency(String path, int sentences, double rate, int maxPending) throws Exception {
        reset(sentences);
        String name = submit(conf(maxPending, true), topology(new Sentences(path, rate)));
        long deadline = System.nanoTime() + (long) ((sentences / rate * 3 + 120) * 1e9);
        while (ACKED.get() < sentences && System.nanoTime() < deadline) {
            Thread.sleep(10);
        }
        kill(name);
        long[] acked = Arrays.stream(latencyNanos).filter(n -> n > 0).sorted().toArray();
        if (acked.length < sentences) {
            throw new IllegalStateException(
                    "only " + acked.length + " of " + sentences + " paced sentences were acked (failed: "
                            + FAILED.get() + ")");
        }
        return new double[] {percentile(acked, 50) / 1e6, percentile(acked, 99) / 1e6};
    }

    /** The value at or under which q percent of the sorted values are. */
    static long percentile(long[] sorted, double q) {
        int index = (int) Math.ceil(q / 100.0 * sorted.length) - 1;
        return sorted[Math.max(0, Math.min(sorted.length - 1, index))];
    }

    static String arg(Map<String, String> args, String name, String fallback) {
        return args.getOrDefault(name, fallback);
    }

    public static void main(String[] argv) throws Exception {
        Map<String, String> args = new HashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) {
            args.put(argv[i], argv[i + 1]);
        }
        String path = args.get("--sentences");
        String idlePath = args.get("--idle-sentences");
        int maxPending = Integer.parseInt(arg(args, "--max-pending", "1000"));
        int pairs = Integer.parseInt(arg(args, "--pairs", "3"));
        double latencySecs = Double.parseDouble(arg(args, "--latency-secs", "30"));
        int latencyRuns = Integer.parseInt(arg(args, "--latency-runs", "1"));
        double idleSpacing = Double.parseDouble(arg(args, "--idle-spacing-secs", "0.3"));
        workers = Integer.parseInt(arg(args, "--workers", "1"));
        List<Integer> sweep = new ArrayList<>();
        for (String s : arg(args, "--sweep", "").split(",")) {
            if (!s.isEmpty()) {
                sweep.add(Integer.parseInt(s));
            }
        }
        String only = arg(args, "--only", "all"); // all | throughput | latency
        int sentences = lines(path);
        long words = (long) sentences * WORDS_PER_SENTENCE;
        BufferedReader stdin = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));

        System.out.println("storm_version=" + org.apache.storm.utils.VersionInfo.getVersion());
        System.out.println("storm_java_version=" + System.getProperty("java.version"));
        System.out.println("storm_sentences=" + sentences);
        System.out.println("storm_words=" + words);
        System.out.println("storm_max_spout_pending=" + maxPending);
        System.out.println("storm_workers=" + workers);
        cluster = new LocalCluster();
        try {
            throughput(path, sentences, maxPending, true); // warm up the JVM: a whole run, not counted
            double acked = Double.MAX_VALUE;
            double unacked = Double.MAX_VALUE;
            double ackedRunning = Double.MAX_VALUE; // from the first emit: without the topology's start
            double unackedRunning = Double.MAX_VALUE;
            List<String> ratios = new ArrayList<>();
            for (int i = 0; i < pairs; i++) {
                double on = throughput(path, sentences, maxPending, true);
                double onRunning = lastFromFirstEmit;
                double off = only.equals("latency") ? Double.NaN : throughput(path, sentences, maxPending, false);
                acked = Math.min(acked, on);
                unacked = Math.min(unacked, off);
                ackedRunning = Math.min(ackedRunning, onRunning);
                unackedRunning = Math.min(unackedRunning, lastFromFirstEmit);
                ratios.add(String.format("%.3f", on / off));
                System.out.printf(
                        "storm_pair_%d_acked_seconds=%.3f (from first emit %.3f) unacked_seconds=%.3f (from first emit"
                                + " %.3f)%n",
                        i + 1, on, onRunning, off, lastFromFirstEmit);
                System.out.flush();
            }
            System.out.printf("storm_acked_words_per_second=%.0f%n", words / acked);
            System.out.printf("storm_acked_from_first_emit_words_per_second=%.0f%n", words / ackedRunning);
            if (!only.equals("latency")) {
                System.out.printf("storm_unacked_words_per_second=%.0f%n", words / unacked);
                System.out.printf("storm_unacked_from_first_emit_words_per_second=%.0f%n", words / unackedRunning);
                System.out.println("storm_acking_on_vs_off_pair_ratios=" + String.join(",", ratios));
            }
            System.out.flush();
            if (!sweep.isEmpty()) {
                double best = acked;
                int bestPending = maxPending;
                for (int pending : sweep) {
                    double seconds = throughput(path, sentences, pending, true);
                    System.out.printf("storm_acked_max_pending_%d_words_per_second=%.0f%n", pending, words / seconds);
                    System.out.flush();
                    if (seconds < best) {
                        best = seconds;
                        bestPending = pending;
                    }
                }
                System.out.printf("storm_acked_best_of_sweep_words_per_second=%.0f%n", words / best);
                System.out.println("storm_acked_best_of_sweep_max_pending=" + bestPending);
            }
            if (only.equals("throughput")) {
                System.out.flush();
                Runtime.getRuntime().halt(0);
            }
            double rate = sentences / acked / 2;
            int paced = Math.max(1, (int) (rate * latencySecs));
            System.out.printf("storm_half_capacity_sentences_per_second=%.0f%n", rate);
            System.out.println("paced_sentences_needed=" + paced);
            System.out.flush();
            String pacedPath = stdin.readLine();
            for (int i = 0; i < latencyRuns; i++) {
                double[] p = latency(pacedPath, lines(pacedPath), rate, maxPending);
                System.out.printf("storm_half_capacity_seconds=%.0f%n", paced / rate);
                System.out.printf("storm_half_capacity_complete_latency_p50_ms=%.1f%n", p[0]);
                System.out.printf("storm_half_capacity_complete_latency_p99_ms=%.1f%n", p[1]);
                System.out.flush();
            }
            if (idlePath != null) {
                double[] p = latency(idlePath, lines(idlePath), 1 / idleSpacing, maxPending);
                System.out.printf("storm_idle_round_trip_p50_ms=%.1f%n", p[0]);
                System.out.printf("storm_idle_round_trip_p99_ms=%.1f%n", p[1]);
            }
        } catch (Exception e) {
            e.printStackTrace();
            System.out.flush();
            Runtime.getRuntime().halt(1);
        }
        // Not cluster.close(): its shutdown can hang on ZooKeeper reconnects; every topology is killed by now.
        System.out.flush();
        Runtime.getRuntime().halt(0);
    }
}
