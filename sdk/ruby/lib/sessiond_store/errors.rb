# frozen_string_literal: true

require 'grpc'
require 'google/rpc/status_pb'
require 'google/rpc/error_details_pb'

class SessiondStore
  # ErrorInfo domain and reasons sessiond attaches to its errors
  # (api/proto/sessiond/v1/errors.go).
  ERROR_DOMAIN = 'sessiond'
  REASON_NOT_PROCESSED = 'NOT_PROCESSED'
  REASON_SUMMARY_CONFLICT = 'SUMMARY_CONFLICT'

  # A call to sessiond failed. #code is the gRPC status code as an Integer
  # (GRPC::Core::StatusCodes; nil when the call never reached the daemon),
  # #code_name its name ("INVALID_ARGUMENT"), #reason the ErrorInfo reason
  # sessiond gave ("" when none), #details the daemon's own message.
  class SessiondError < StandardError
    attr_reader :code, :reason, :details

    def initialize(message, code: nil, reason: '', details: nil)
      super(message)
      @code = code
      @reason = reason.to_s
      @details = details
    end

    def code_name
      SessiondStore::Errors.code_name(@code)
    end
  end

  # No daemon answers at the socket (not started, stopped, restarting).
  # Calls retry it a few times before raising it.
  class SessiondUnavailableError < SessiondError; end

  # The socket is served, or its folder is controlled, by another user:
  # whatever is sent there would hand this user's transcripts to someone
  # else. Nothing was sent. Never retried: a person has to look.
  class UntrustedSocketError < SessiondError
    attr_reader :socket, :folder, :own_uid, :server_uid, :server_pid, :folder_uid, :folder_link

    def initialize(socket:, folder:, own_uid:, server_uid: nil, server_pid: nil, folder_uid: nil,
                   folder_link: nil, problem: '')
      @socket = socket
      @folder = folder
      @own_uid = own_uid
      @server_uid = server_uid
      @server_pid = server_pid
      @folder_uid = folder_uid
      @folder_link = folder_link
      super(compose(problem), reason: 'UNTRUSTED_SOCKET')
    end

    private

    def compose(problem)
      text = +"refusing the sessiond socket #{@socket}: "
      if @server_uid
        pid = @server_pid && @server_pid.positive? ? "pid #{@server_pid}" : 'pid unknown'
        text << "the process serving it runs as uid #{@server_uid} (#{pid}), neither you (uid #{@own_uid}) nor root"
        if @folder_link
          text << "; its folder #{@folder} is a symlink to #{@folder_link}"
        elsif @folder_uid && @folder_uid != @own_uid
          text << "; its folder #{@folder} is owned by uid #{@folder_uid}"
        end
      else
        text << problem
        text << " (the link is owned by uid #{@folder_uid})" if @folder_link && @folder_uid
      end
      text << ". Nothing was sent to it. Someone else may have set it up to collect your transcripts: " \
              "check who made #{@folder} and remove it, or set SESSIOND_SOCKET (or XDG_RUNTIME_DIR) " \
              'to a folder that only you own and run sessiond there'
      text
    end
  end

  # Turns gRPC failures into SessiondErrors whose message a person can act
  # on: the daemon's own words when they are its words, else what the status
  # code means here and what to do. gRPC's transport text (and its
  # debug_error_string) never reaches the message.
  module Errors
    CODES = GRPC::Core::StatusCodes
    ERROR_INFO_TYPE = 'type.googleapis.com/google.rpc.ErrorInfo'

    # Codes that gRPC itself produces (the connection, the deadline, the
    # message size): their details are transport text, replaced by ours.
    TRANSPORT_CODES = [CODES::UNAVAILABLE, CODES::DEADLINE_EXCEEDED, CODES::CANCELLED,
                       CODES::UNIMPLEMENTED, CODES::UNKNOWN, CODES::UNAUTHENTICATED].freeze

    module_function

    def code_name(code)
      return 'NO_CODE' if code.nil?

      name = CODES.constants.find { |c| CODES.const_get(c) == code }
      name ? name.to_s : code.to_s
    end

    # The ErrorInfo reason sessiond attached to a failed call, or "".
    def reason(metadata)
      bins = metadata && metadata['grpc-status-details-bin']
      Array(bins).each do |bin|
        status = Google::Rpc::Status.decode(bin.to_s.b)
        status.details.each do |any|
          next unless any.type_url == ERROR_INFO_TYPE

          info = Google::Rpc::ErrorInfo.decode(any.value)
          return info.reason if info.domain == ERROR_DOMAIN
        end
      rescue Google::Protobuf::ParseError, ArgumentError
        next
      end
      ''
    end

    # What a status code means for the caller, when the daemon's message
    # is not the one to show.
    def explain(code, socket, timeout)
      case code
      when CODES::UNAVAILABLE
        "no answer from sessiond at #{socket} (it stopped, is restarting, or was never started): " \
          'start sessiond, or point SESSIOND_SOCKET at the socket it serves'
      when CODES::DEADLINE_EXCEEDED
        "sessiond at #{socket} did not answer within #{timeout} s (busy, or waiting on a slow disk): " \
          'try again; `sessionctl status` shows what it is doing, and its log says why'
      when CODES::CANCELLED
        'the call was cancelled before sessiond answered'
      when CODES::UNIMPLEMENTED
        "sessiond at #{socket} does not know this call: it is older than this adapter; upgrade sessiond"
      when CODES::UNAUTHENTICATED
        "sessiond at #{socket} refused the connection; check that it runs as you"
      else
        "sessiond at #{socket} failed in a way it did not explain: its log says more"
      end
    end

    # The SessiondError for a GRPC::BadStatus raised by the call `what`.
    def from_status(what, error, socket:, timeout:)
      code = error.code
      reason = reason(error.metadata)
      details = error.details.to_s
      # A daemon's answer carries its ErrorInfo (NOT_PROCESSED while it
      # drains); a bare UNAVAILABLE or deadline is gRPC's own text.
      text = if TRANSPORT_CODES.include?(code) && reason.empty?
               explain(code, socket, timeout)
             elsif details.empty?
               explain(code, socket, timeout)
             else
               details
             end
      klass = code == CODES::UNAVAILABLE ? SessiondUnavailableError : SessiondError
      klass.new("sessiond #{what}: #{text} (#{code_name(code)})", code: code, reason: reason, details: details)
    end
  end
end
