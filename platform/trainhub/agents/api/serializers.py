from rest_framework import serializers


class GpuSerializer(serializers.Serializer):
    index = serializers.IntegerField(min_value=0)
    model = serializers.CharField(max_length=200)
    memory_mb = serializers.IntegerField(min_value=0)
    uuid = serializers.CharField(max_length=200, required=False, allow_blank=True)


class EnrollSerializer(serializers.Serializer):
    token = serializers.CharField(max_length=200, write_only=True)
    hostname = serializers.CharField(max_length=255)
    address = serializers.CharField(max_length=255)
    cpus = serializers.FloatField(min_value=0.1)
    memory_mb = serializers.IntegerField(min_value=1)
    gpus = GpuSerializer(many=True, required=False, default=list)


class EnrolledSerializer(serializers.Serializer):
    node_id = serializers.IntegerField()
    credential = serializers.CharField()
