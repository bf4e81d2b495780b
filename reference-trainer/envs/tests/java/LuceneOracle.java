// The Java side of tests/webshop_lucene_parity.rs (run by it; not a test of its own): Anserini's
// analyzer as pyserini's LuceneSearcher builds it (DefaultEnglishAnalyzer.newDefaultInstance():
// StandardTokenizer, EnglishPossessiveFilter, LowerCaseFilter, Lucene's English stop words,
// PorterStemFilter) and the pieces of it, over UTF-8 lines on stdin.
//
//   java -cp anserini-0.14.3-fatjar.jar:. LuceneOracle MODE < lines > out
//
// MODE analyze | tokenize: per input line one output line, the terms separated by single spaces
// (a term never holds whitespace). MODE lower: no input; for every code point, one line
// "CP LOWER" in hex (Character.toLowerCase(int)), and "java.version" as the first line.
import io.anserini.analysis.DefaultEnglishAnalyzer;
import java.io.*;
import java.nio.charset.StandardCharsets;
import org.apache.lucene.analysis.Analyzer;
import org.apache.lucene.analysis.TokenStream;
import org.apache.lucene.analysis.Tokenizer;
import org.apache.lucene.analysis.standard.StandardTokenizer;
import org.apache.lucene.analysis.tokenattributes.CharTermAttribute;

public class LuceneOracle {
  public static void main(String[] args) throws Exception {
    PrintStream out = new PrintStream(new BufferedOutputStream(System.out), false, "UTF-8");
    if (args[0].equals("lower")) {
      out.println(System.getProperty("java.version"));
      for (int cp = 0; cp <= 0x10FFFF; cp++) {
        int l = Character.toLowerCase(cp);
        if (l != cp) out.println(Integer.toHexString(cp) + " " + Integer.toHexString(l));
      }
      out.flush();
      return;
    }
    Analyzer analyzer = DefaultEnglishAnalyzer.newDefaultInstance();
    BufferedReader in =
        new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    String line;
    while ((line = in.readLine()) != null) {
      TokenStream ts;
      if (args[0].equals("tokenize")) {
        Tokenizer t = new StandardTokenizer();
        t.setReader(new StringReader(line));
        ts = t;
      } else {
        ts = analyzer.tokenStream("contents", line);
      }
      CharTermAttribute term = ts.addAttribute(CharTermAttribute.class);
      ts.reset();
      StringBuilder sb = new StringBuilder();
      boolean first = true;
      while (ts.incrementToken()) {
        if (!first) sb.append(' ');
        sb.append(term.toString());
        first = false;
      }
      ts.end();
      ts.close();
      out.println(sb);
    }
    out.flush();
  }
}
