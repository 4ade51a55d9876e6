# frozen_string_literal: true

# The store rides over a daemon restart: the next call checks the socket
# again and reconnects, and a call made while the daemon is down is retried
# until it is back (within the retry window).

require_relative 'helper'

class TestRestart < Minitest::Test
  def test_the_daemon_restarted_between_calls
    d = TestSupport::Daemon.start('sdrb-restart-')
    s = SessiondStore.new(socket_path: d.socket, fold: nil)
    k = TestSupport.key('-tmp-sdrb-restart', SecureRandom.uuid)
    first = TestSupport.entry('before')
    s.append(k, [first])
    assert_equal 0, d.stop
    d.start
    second = TestSupport.entry('after')
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    s.append(k, [second])
    assert_equal [first, second], s.load(k)
    assert_operator Process.clock_gettime(Process::CLOCK_MONOTONIC) - started, :<, 5
  ensure
    s&.close
    assert_equal 0, d.stop if d
    d&.remove
  end

  def test_the_daemon_coming_back_during_the_retries
    d = TestSupport::Daemon.start('sdrb-back-')
    s = SessiondStore.new(socket_path: d.socket, fold: nil, tries: 6, backoff: [0.25, 0.5, 1, 2])
    k = TestSupport.key('-tmp-sdrb-back', SecureRandom.uuid)
    s.append(k, [TestSupport.entry('one')])
    assert_equal 0, d.stop
    restarter = Thread.new do
      sleep 0.3
      d.start
    end
    s.append(k, [TestSupport.entry('two')])
    restarter.join
    assert_equal %w[one two], s.load(k).map { |e| e['message']['content'] }
  ensure
    s&.close
    assert_equal 0, d.stop if d
    d&.remove
  end
end
