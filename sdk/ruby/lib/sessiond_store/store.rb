# frozen_string_literal: true

require 'digest'
require 'securerandom'
require 'grpc'

require_relative 'version'
require_relative 'errors'
require_relative 'layout'
require_relative 'trust'
require_relative 'codec'
require_relative 'summaries'
require_relative 'gen/sessiond_services_pb'

# A SessionStore for the Ruby Agent SDK (claude-agent-sdk) whose transcripts
# sessiond keeps: every append is durable, whole and never interleaved with
# another when it returns.
#
#   store = SessiondStore.new                       # the default socket
#   store = SessiondStore.new(socket_path: '/run/user/1000/sessiond/sessiond.sock')
#
# Synchronous and thread-safe: any thread may call any method; appends to
# one transcript are sent one at a time, in the order they were called.
#
# Options:
# - socket_path: the daemon's socket; by default the one sessiond itself
#   picks ($SESSIOND_SOCKET, $XDG_RUNTIME_DIR/sessiond/sessiond.sock, ...:
#   SessiondStore.default_socket).
# - agent_config_dir: the CLAUDE_CONFIG_DIR of the agent whose transcripts
#   are mirrored here; by default $CLAUDE_CONFIG_DIR, else ~/.claude, read at
#   each append. When it is sessiond's root (both on their defaults), the
#   CLI's copy of each transcript is sessiond's file: sessiond takes in the
#   CLI's lines and answers their mirrored copies as duplicates.
# - fold: how a session's summary is folded from each batch, called as
#   fold.call(previous_or_nil, key, entries) and returning
#   { 'session_id', 'mtime', 'data' }. By default the SDK's
#   ClaudeAgentSDK::SessionSummary.fold_session_summary (the SDK is required
#   when it is not loaded yet); nil turns summaries off.
# - timeout, load_timeout: seconds one call may take (load_timeout for
#   reading a whole transcript).
# - tries, backoff, retry_window: a call that finds no daemon or is answered
#   UNAVAILABLE or DEADLINE_EXCEEDED is tried again, up to tries attempts,
#   backoff[i] seconds apart, none started retry_window seconds after the
#   first (an append keeps its batch id, so it is stored once).
# - max_batch_bytes: an append larger than this is sent as several requests.
# - logger: where warnings go (anything with #warn); by default Kernel#warn.
class SessiondStore
  SDK_FOLD = :sdk

  attr_reader :socket_path

  def initialize(socket_path: nil, agent_config_dir: nil, fold: SDK_FOLD, timeout: 30.0, load_timeout: 120.0,
                 tries: 3, backoff: [1.0, 4.0], retry_window: 10.0, max_batch_bytes: 48 << 20, logger: nil)
    @socket_path = socket_path.nil? || socket_path.to_s.empty? ? Layout.default_socket : socket_path.to_s
    @agent_config_dir = agent_config_dir
    @fold_option = fold
    @timeout = timeout
    @load_timeout = load_timeout
    @tries = [tries.to_i, 1].max
    @backoff = Array(backoff).empty? ? [1.0] : Array(backoff)
    @retry_window = retry_window
    @max_batch_bytes = max_batch_bytes
    @logger = logger

    @conn_lock = Mutex.new
    @channel = nil
    @stub = nil
    @generation = 0

    @queues_lock = Mutex.new
    @queues = {}

    @summaries = Summaries::Cache.new
    @summaries_unsupported = false
    @batch_ids = BatchIds.new
  end

  def inspect
    "#<SessiondStore socket_path=#{@socket_path.inspect}>"
  end
  alias to_s inspect

  # The fold in use (resolved on first need), or nil when summaries are off.
  def fold
    return @fold if defined?(@fold)

    @fold = if @fold_option == SDK_FOLD
              Summaries.sdk_fold(self)
            elsif @fold_option.nil?
              nil
            elsif @fold_option.respond_to?(:call)
              @fold_option
            else
              raise ArgumentError, "fold must respond to #call (or be nil): #{@fold_option.inspect}"
            end
  end

  # Closes the connection; a later call opens a new one.
  def close
    @conn_lock.synchronize do
      @channel&.close
      @channel = nil
      @stub = nil
    end
    nil
  end

  # ---- SessionStore ---------------------------------------------------------

  # Stores entries at the end of the transcript key names, durably.
  #
  # Each call is one batch with its own id, so the store's own retries
  # cannot store it twice. The SDK retries a failed append by calling again
  # with the same entries: when the last call for this transcript with
  # exactly these entries failed, the id is reused, so a batch the daemon
  # stored before its answer was lost is not stored again. Entries whose uuid
  # the transcript already holds are not stored again either.
  def append(key, entries)
    project_key, session_id, subpath = parse_key(key)
    entries = Array(entries)
    return nil if entries.empty?

    payload = entries.each_with_index.map { |e, i| Codec.encode(e, i) }
    transcript = [project_key, session_id, subpath].freeze
    digest = BatchIds.digest(payload)
    batch_id = @batch_ids.reuse(transcript, digest)
    in_order(transcript) do
      append_in_order(entries, payload, batch_id, transcript)
    rescue Exception # rubocop:disable Lint/RescueException -- a killed thread's batch may have been stored
      @batch_ids.failed(transcript, digest, batch_id)
      raise
    end
    @batch_ids.forget(transcript, digest)
    nil
  end

  # The transcript's entries in order; nil when it was never written (or was
  # deleted). Lines that are not one JSON object (torn by a crash of another
  # writer, or foreign) are skipped, as the SDK's readers skip them.
  def load(key)
    project_key, session_id, subpath = parse_key(key)
    lines = read_lines(project_key, session_id, subpath)
    lines && entries_of(lines)
  end

  # [{ 'session_id', 'mtime' }] of the project's main transcripts, mtime in
  # epoch milliseconds; [] for a project sessiond does not know.
  def list_sessions(project_key)
    project_key = require_string(project_key, 'project_key')
    request = Sessiond::V1::ListSessionsRequest.new(project_key: project_key)
    sessions = not_found_as([]) do
      call("list #{project_key}") do |stub, deadline|
        stub.list_sessions(request, deadline: deadline).flat_map { |page| page.sessions.to_a }
      end
    end
    sessions.filter_map do |s|
      { 'session_id' => s.session.session_id, 'mtime' => s.modified_ms } if s.session.subpath.empty?
    end
  end

  # [{ 'session_id', 'mtime', 'data' }] for the project's sessions that have
  # a summary, in one call. A summary another SDK folded (the TypeScript one
  # names its fields differently) is left out: the SDK reads such a session
  # itself.
  def list_session_summaries(project_key)
    project_key = require_string(project_key, 'project_key')
    fold # resolved now, so that a missing SDK is reported (once) here too
    begin
      listed = list_summaries(project_key)
    rescue SessiondError => e
      raise unless e.code == GRPC::Core::StatusCodes::UNIMPLEMENTED

      return fold_summaries(project_key)
    end
    listed.filter_map do |s|
      data = Summaries.json_object(s.data)
      { 'session_id' => s.session_id, 'mtime' => s.mtime_ms, 'data' => data } if Summaries.ours?(data)
    end
  end

  # Moves the transcript to sessiond's trash; a main key (no subpath, or an
  # empty one) takes its subagent transcripts along. Deleting what does not
  # exist succeeds.
  def delete(key)
    project_key, session_id, subpath = parse_key(key)
    request = Sessiond::V1::DeleteRequest.new(session: ref(project_key, session_id, subpath))
    not_found_as(nil) do
      call("delete #{describe(project_key, session_id, subpath)}") do |stub, deadline|
        stub.delete(request, deadline: deadline)
      end
    end
    nil
  ensure
    @summaries.delete([project_key, session_id]) if subpath && subpath.empty?
  end

  # The session's subagent transcripts ("subagents/agent-..."), without the
  # main one; [] for an unknown session.
  def list_subkeys(key)
    project_key, session_id, = parse_key(key)
    request = Sessiond::V1::ListSubkeysRequest.new(session: ref(project_key, session_id, ''))
    response = not_found_as(nil) do
      call("list the subkeys of #{project_key}/#{session_id}") do |stub, deadline|
        stub.list_subkeys(request, deadline: deadline)
      end
    end
    response ? response.subkeys.to_a : []
  end

  # ---- internals ------------------------------------------------------------

  # Called by Summaries.sdk_fold when the SDK cannot be loaded.
  def warning(message)
    if @logger
      @logger.warn(message)
    else
      Kernel.warn("sessiond_store: #{message}")
    end
  end

  private

  # Hash keys of the SDK's SessionKey: strings, symbols accepted too.
  def key_field(key, name)
    return nil unless key.respond_to?(:[])

    value = key[name]
    value = key[name.to_sym] if value.nil? && key.is_a?(Hash)
    value
  end

  # [project_key, session_id, subpath] of a SessionKey; subpath is "" for the
  # main transcript (the Ruby SDK's contract: an empty subpath is the main
  # transcript).
  def parse_key(key)
    raise ArgumentError, "a SessionKey is a Hash, not #{key.inspect}" unless key.is_a?(Hash)

    project_key = key_field(key, 'project_key')
    session_id = key_field(key, 'session_id')
    subpath = key_field(key, 'subpath')
    raise ArgumentError, "SessionKey without a project_key: #{key.inspect}" unless project_key.is_a?(String) && !project_key.empty?
    raise ArgumentError, "SessionKey without a session_id: #{key.inspect}" unless session_id.is_a?(String) && !session_id.empty?
    raise ArgumentError, "SessionKey with a subpath that is not a String: #{key.inspect}" unless subpath.nil? || subpath.is_a?(String)

    [project_key, session_id, subpath.to_s]
  end

  def require_string(value, what)
    raise ArgumentError, "#{what} must be a non-empty String, not #{value.inspect}" unless value.is_a?(String) && !value.empty?

    value
  end

  def ref(project_key, session_id, subpath)
    Sessiond::V1::SessionRef.new(project_key: project_key, session_id: session_id, subpath: subpath)
  end

  def describe(project_key, session_id, subpath)
    subpath.empty? ? "#{project_key}/#{session_id}" : "#{project_key}/#{session_id}/#{subpath}"
  end

  # -- connection --

  # [stub, generation]; the socket is checked (Trust) before gRPC connects,
  # and again whenever the channel is not connected, since gRPC would then
  # connect on its own to whatever serves the path by now.
  def connection
    @conn_lock.synchronize do
      if @stub
        state = @channel.connectivity_state(false)
        Trust.verify(@socket_path) unless state == GRPC::Core::ConnectivityStates::READY
        return [@stub, @generation]
      end
      Trust.verify(@socket_path)
      target = "unix:#{@socket_path}"
      @channel = GRPC::Core::Channel.new(
        target,
        { 'grpc.max_receive_message_length' => -1, 'grpc.max_send_message_length' => -1 },
        :this_channel_is_insecure
      )
      @stub = Sessiond::V1::Sessiond::Stub.new(target, :this_channel_is_insecure, channel_override: @channel)
      @generation += 1
      [@stub, @generation]
    end
  end

  # Forgets a channel whose daemon went away, so the next call checks the
  # socket again (the daemon may have been replaced) and connects at once
  # instead of waiting out gRPC's reconnect backoff. Calls still running on
  # it keep it until they end.
  def drop_channel(generation)
    @conn_lock.synchronize do
      next unless generation == @generation && @stub

      @channel = nil
      @stub = nil
    end
  end

  RETRYABLE = [GRPC::Core::StatusCodes::UNAVAILABLE, GRPC::Core::StatusCodes::DEADLINE_EXCEEDED].freeze
  private_constant :RETRYABLE

  # Yields (stub, deadline) under the retry policy; raises SessiondError.
  def call(what, timeout: @timeout)
    start = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    attempt = 0
    loop do
      attempt += 1
      generation = nil
      begin
        stub, generation = connection
        return yield(stub, Time.now + timeout)
      rescue UntrustedSocketError
        raise
      rescue SessiondUnavailableError => e
        err = e
      rescue GRPC::BadStatus => e
        err = Errors.from_status(what, e, socket: @socket_path, timeout: timeout)
        drop_channel(generation) if e.code == GRPC::Core::StatusCodes::UNAVAILABLE && generation
      end
      retryable = err.is_a?(SessiondUnavailableError) || RETRYABLE.include?(err.code)
      delay = @backoff[[attempt - 1, @backoff.length - 1].min].to_f
      elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - start
      raise err if !retryable || attempt >= @tries || elapsed + delay > @retry_window

      sleep(delay)
    end
  end

  def not_found_as(value)
    yield
  rescue SessiondError => e
    raise unless e.code == GRPC::Core::StatusCodes::NOT_FOUND

    value
  end

  # -- order of appends --

  # One transcript's appends run one at a time, in the order they arrived
  # (a ticket each; a thread killed while waiting gives its turn up).
  class Turns
    attr_accessor :users

    def initialize
      @next = 0
      @serving = 0
      @abandoned = {}
      @cond = ConditionVariable.new
      @users = 0
    end

    def take
      ticket = @next
      @next += 1
      ticket
    end

    def wait(ticket, lock)
      @cond.wait(lock) until @serving == ticket
    end

    def mine?(ticket)
      @serving == ticket
    end

    def abandon(ticket)
      @abandoned[ticket] = true
    end

    def advance
      @serving += 1
      @serving += 1 while @abandoned.delete(@serving)
      @cond.broadcast
    end
  end
  private_constant :Turns

  def in_order(transcript)
    turns = nil
    ticket = nil
    @queues_lock.synchronize do
      turns = (@queues[transcript] ||= Turns.new)
      turns.users += 1
      ticket = turns.take
      served = false
      begin
        turns.wait(ticket, @queues_lock)
        served = true
      ensure
        # Killed or interrupted while waiting (Thread#kill is no exception
        # a rescue sees): give the turn up, or the appends behind it would
        # wait forever.
        unless served
          turns.mine?(ticket) ? turns.advance : turns.abandon(ticket)
          release(transcript, turns)
        end
      end
    end
    begin
      yield
    ensure
      @queues_lock.synchronize do
        turns.advance
        release(transcript, turns)
      end
    end
  end

  def release(transcript, turns)
    turns.users -= 1
    @queues.delete(transcript) if turns.users.zero? && @queues[transcript].equal?(turns)
  end

  # -- append --

  def agent_config_dir
    dir = @agent_config_dir
    dir = ENV['CLAUDE_CONFIG_DIR'] if dir.nil? || dir.to_s.empty?
    dir = File.join(Dir.home, '.claude') if dir.nil? || dir.to_s.empty?
    # As the CLI resolves it: relative to the working directory (sessiond
    # takes only absolute paths).
    File.expand_path(dir.to_s)
  end

  def chunks(payload)
    out = [[]]
    size = 0
    payload.each do |data|
      if !out.last.empty? && size + data.bytesize > @max_batch_bytes
        out << []
        size = 0
      end
      out.last << data
      size += data.bytesize
    end
    out
  end

  def append_in_order(entries, payload, batch_id, transcript)
    project_key, session_id, subpath = transcript
    what = "append to #{describe(project_key, session_id, subpath)}"
    summarise = subpath.empty? && !@summaries_unsupported && !fold.nil?
    parts = chunks(payload)
    base = nil
    if summarise && parts.length > 1
      # Folded before the first part is stored: the summary sent with the
      # last part covers the lines the earlier parts add too.
      begin
        base = summary_base(project_key, session_id)
      rescue UntrustedSocketError
        raise
      rescue SessiondError => e
        # The transcript comes first (see send_with_summary).
        warning("#{what}: cannot read the summary to fold onto (#{e.message}); the entries are stored without updating the summary")
        summarise = false
        @summaries.delete([project_key, session_id])
      end
    end
    config_dir = agent_config_dir
    parts.each_with_index do |part, i|
      request = Sessiond::V1::AppendRequest.new(
        session: ref(project_key, session_id, subpath),
        entries: part,
        # A batch too big for one request goes as several, each with an id
        # derived from the batch's.
        batch_id: parts.length == 1 ? batch_id : "#{batch_id}.#{i}",
        agent_config_dir: config_dir
      )
      if summarise && i == parts.length - 1
        send_with_summary(what, request, entries, base)
        return
      end
      response = call(what) { |stub, deadline| stub.append(request, deadline: deadline) }
      base.covered += stored_count(response) + response.absorbed_entries if base&.covered
    end
  end

  MAX_SUMMARY_CONFLICTS = 100
  # SUMMARY_FOLDER names the Ruby SDK's summary format to sessiond, which
  # keeps one summary per folder: a session the TypeScript or Python adapter
  # also writes keeps each SDK's own, so neither refolds the other's.
  SUMMARY_FOLDER = 'claude-agent-sdk-ruby'
  private_constant :MAX_SUMMARY_CONFLICTS

  def send_with_summary(what, request, entries, base)
    project_key = request.session.project_key
    session_id = request.session.session_id
    cache_key = [project_key, session_id]
    main = { 'project_key' => project_key, 'session_id' => session_id }
    MAX_SUMMARY_CONFLICTS.times do |conflicts|
      problem = nil
      begin
        base ||= summary_base(project_key, session_id)
      rescue UntrustedSocketError
        raise
      rescue SessiondError => e
        # A read that fails (damage in the session's journal, the daemon
        # out of descriptors) must not keep the batch from being stored:
        # the Append may well succeed.
        problem = "cannot read the summary to fold onto (#{e.message})"
      end
      unless problem
        begin
          if @summaries_unsupported
            call(what) { |stub, deadline| stub.append(request, deadline: deadline) }
            return
          end
          folded = run_fold(base.summary, main, entries)
          data = Summaries.encode(folded['data'] || {})
          if data.bytesize > Summaries::MAX_BYTES
            problem = "the folded summary is #{data.bytesize} bytes, over sessiond's limit of #{Summaries::MAX_BYTES}"
          end
        rescue SessiondError
          raise
        rescue StandardError => e # the fold is someone else's code
          problem = "the summary fold failed: #{e.class}: #{e.message}"
        end
      end
      if problem
        # The transcript comes first: store the entries and leave the
        # summary as it was (sessiond then reports it stale, so the SDK
        # reads the session itself).
        warning("#{what}: #{problem}; the entries are stored without updating the summary")
        request.summary = nil
        call(what) { |stub, deadline| stub.append(request, deadline: deadline) }
        if base.nil?
          @summaries.delete(cache_key)
        else
          @summaries.put(cache_key, Summaries::Known.new(base.version, nil, nil, true))
        end
        return
      end
      # covers_entries: the line count the fold started from; sessiond
      # refuses the summary (SUMMARY_CONFLICT) when lines were added without
      # one since, and the next round folds the whole transcript.
      request.summary = Sessiond::V1::SummaryUpdate.new(
        data: data, expected_version: base.version,
        covers_entries: base.covered || 0, check_coverage: !base.covered.nil?,
        folder: SUMMARY_FOLDER
      )
      begin
        response = call(what) { |stub, deadline| stub.append(request, deadline: deadline) }
      rescue SessiondError => e
        @summaries.delete(cache_key)
        raise unless e.code == GRPC::Core::StatusCodes::ABORTED && e.reason == REASON_SUMMARY_CONFLICT

        # Another writer stored a summary since the one folded onto;
        # nothing of this batch was stored. Fold onto theirs and send
        # again, with the same batch id.
        base = nil
        sleep(rand * 0.005 * conflicts) if conflicts >= 3
        next
      end
      if response.duplicate_batch || response.summary_version.zero?
        # Stored by an earlier call whose answer was lost (with the summary
        # folded then), or by a daemon that keeps no summaries: what is
        # stored is not what was folded now.
        @summaries.delete(cache_key)
      elsif !base.covered.nil? && response.entries != base.covered + stored_count(response) + response.absorbed_entries
        # Lines were appended without a summary since the one folded onto
        # (sessionctl rename or tag, a store without a fold): the next
        # append folds the whole transcript again. (The lines the agent's
        # CLI wrote into the transcript itself, when its config dir is
        # sessiond's root, are counted apart, absorbed_entries: this batch
        # mirrors them.)
        @summaries.put(cache_key, Summaries::Known.new(response.summary_version, nil, nil, true))
      else
        @summaries.put(cache_key, Summaries::Known.new(response.summary_version, folded, response.entries, false))
      end
      return
    end
    raise SessiondError.new("sessiond #{what}: the session's summary kept changing through " \
                            "#{MAX_SUMMARY_CONFLICTS} attempts to update it; try again")
  end

  # What the next batch of a session folds onto: the summary this store
  # stored last; else the one sessiond holds; else (none yet, or one folded
  # by another SDK, whose fields differ) a fold of the whole transcript, so
  # the first summary stored covers the whole session.
  def summary_base(project_key, session_id)
    cached = @summaries.get([project_key, session_id])
    return cached.dup if cached && !cached.rebuild
    return fold_transcript(project_key, session_id, cached.version) if cached

    begin
      stored = stored_summary(project_key, session_id)
    rescue SessiondError => e
      raise unless e.code == GRPC::Core::StatusCodes::UNIMPLEMENTED

      warning("sessiond at #{@socket_path} keeps no summaries (it predates ListSummaries): " \
              'appends carry none, and listings fold each session')
      @summaries_unsupported = true
      return Summaries::Known.new(0, nil, nil, false)
    end
    return stored if stored && Summaries.ours?(stored.summary && stored.summary['data']) && !stored.rebuild

    fold_transcript(project_key, session_id, stored ? stored.version : 0)
  end

  def fold_transcript(project_key, session_id, version)
    lines = read_lines(project_key, session_id, '')
    return Summaries::Known.new(version, nil, 0, false) if lines.nil?

    entries = entries_of(lines)
    main = { 'project_key' => project_key, 'session_id' => session_id }
    summary = entries.empty? ? nil : run_fold(nil, main, entries)
    Summaries::Known.new(version, summary, lines.length, false)
  end

  def run_fold(previous, key, entries)
    result = fold.call(previous, key, entries)
    unless result.is_a?(Hash) && (result['data'].nil? || result['data'].is_a?(Hash))
      raise TypeError, "the fold returned #{result.inspect}, not a summary with a data Hash"
    end

    result
  end

  def stored_summary(project_key, session_id)
    list_summaries(project_key, session_id).each do |s|
      # sessiond keeps a session under its lower-case id, whatever the
      # key's case.
      next unless s.session_id.casecmp?(session_id)

      summary = { 'session_id' => s.session_id, 'mtime' => s.mtime_ms, 'data' => Summaries.json_object(s.data) }
      # A summary missing lines added without one is no base: rebuild.
      return Summaries::Known.new(s.version, summary, nil, true) if s.covers_entries != s.entries

      return Summaries::Known.new(s.version, summary, s.entries, false)
    end
    nil
  end

  def list_summaries(project_key, session_id = '')
    request = Sessiond::V1::ListSummariesRequest.new(project_key: project_key, session_id: session_id,
                                                       folder: SUMMARY_FOLDER)
    not_found_as([]) do
      call("list the summaries of #{project_key}") do |stub, deadline|
        stub.list_summaries(request, deadline: deadline).flat_map { |page| page.summaries.to_a }
      end
    end
  end

  # Summaries folded from the transcripts, for a daemon that keeps none.
  def fold_summaries(project_key)
    @summaries_unsupported = true
    return [] if fold.nil?

    list_sessions(project_key).filter_map do |s|
      main = { 'project_key' => project_key, 'session_id' => s['session_id'] }
      entries = load(main)
      next if entries.nil? || entries.empty?

      folded = run_fold(nil, main, entries)
      { 'session_id' => s['session_id'], 'mtime' => s['mtime'], 'data' => folded['data'] || {} }
    end
  end

  # Every line of a transcript (Entry messages); nil when it has none or
  # does not exist.
  def read_lines(project_key, session_id, subpath)
    request = Sessiond::V1::ReadRequest.new(session: ref(project_key, session_id, subpath))
    lines = not_found_as(nil) do
      call("read #{describe(project_key, session_id, subpath)}", timeout: @load_timeout) do |stub, deadline|
        stub.read(request, deadline: deadline).flat_map { |page| page.entries.to_a }
      end
    end
    lines.nil? || lines.empty? ? nil : lines
  end

  def entries_of(lines)
    lines.filter_map { |line| Codec.decode(line.data) unless line.malformed }
  end

  def stored_count(response)
    response.results.count { |r| r.outcome == :ENTRY_OUTCOME_STORED }
  end

  # Batch ids of appends that failed, by transcript and content, so that
  # the SDK's retry of the same entries goes under the same id. Kept five
  # minutes (sessiond remembers ids for ten), at most 1024.
  class BatchIds
    TTL = 300.0
    MAX = 1024

    def self.digest(payload)
      sha = Digest::SHA256.new
      payload.each do |data|
        sha.update([data.bytesize].pack('Q>'))
        sha.update(data)
      end
      sha.digest
    end

    def initialize
      @ids = {} # insertion-ordered: oldest first
      @lock = Mutex.new
    end

    def reuse(transcript, digest)
      now = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      @lock.synchronize do
        @ids.shift while !@ids.empty? && now - @ids.first[1][1] > TTL
        hit = @ids[[transcript, digest]]
        hit ? hit[0] : SecureRandom.uuid
      end
    end

    def failed(transcript, digest, batch_id)
      @lock.synchronize do
        @ids.delete([transcript, digest])
        @ids[[transcript, digest]] = [batch_id, Process.clock_gettime(Process::CLOCK_MONOTONIC)]
        @ids.shift while @ids.length > MAX
      end
    end

    def forget(transcript, digest)
      @lock.synchronize { @ids.delete([transcript, digest]) }
    end
  end
  private_constant :BatchIds
end
